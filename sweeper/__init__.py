"""sweeper: DP-SGD membership-inference sweeps, measured attack precision next to the bound.

Orchestration lives here (config, plan, runner, store, tracking, frontier, bounds); the work
done inside tasks (data, models, DP training, attacks, metrics) lives in the `jobs` package.
"""

#: The one place the version is written: pyproject.toml reads it (`tool.setuptools.dynamic`), and
#: every command's `--version` prints it, installed or run from a checkout.
__version__ = "0.1.0"
VERSION_TEXT = f"sweeper {__version__}"
