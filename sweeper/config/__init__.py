"""The sweep's configuration: its schema (`schema`) and its sections' checks (`checks`).

Importing it is cheap (no torch, Ray, MLflow or matplotlib): the schema is dataclasses, and each
check imports what it needs when it runs.  Re-exports what the rest of the project uses; every
problem of a configuration, the planner's included, is `sweeper.validation.find_problems`.
"""

from sweeper.config.checks import ConfigError, did_you_mean
from sweeper.config.schema import GridConfig, SweepConfig, register_schema, to_sweep_config

__all__ = ["ConfigError", "GridConfig", "SweepConfig", "did_you_mean", "register_schema",
           "to_sweep_config"]
