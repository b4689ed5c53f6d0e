"""The sweep's configuration: its schema (`schema`) and the checks it must pass (`checks`).

Importing it is cheap (no torch, Ray, MLflow or matplotlib): the schema is dataclasses, and each
check imports what it needs when it runs.  Re-exports what the rest of the project uses; every
problem of a configuration as a list is `sweeper.config.checks.find_problems`.
"""

from sweeper.config.checks import ConfigError, did_you_mean, validate
from sweeper.config.schema import GridConfig, SweepConfig, register_schema, to_sweep_config

__all__ = ["ConfigError", "GridConfig", "SweepConfig", "did_you_mean", "register_schema",
           "to_sweep_config", "validate"]
