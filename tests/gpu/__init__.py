"""What only a GPU can show; a package, so its conftest is `gpu.conftest` and never shadows
tests/conftest.py as the module `conftest` that tests import helpers from."""
