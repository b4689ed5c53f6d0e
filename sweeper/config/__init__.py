"""What a sweep's configuration is: its schema (`schema`) and how a problem with it is reported
and refused (`problems`).

Importing it is cheap (no torch, Ray, MLflow or matplotlib): the schema is dataclasses.  The
checks that find the problems are `sweeper.checks`, above everything they check; every problem
of a configuration, the planner's included, is `sweeper.checks.validation.find_problems`.
"""

from sweeper.config.problems import ConfigError, did_you_mean
from sweeper.config.schema import GridConfig, SweepConfig, register_schema, to_sweep_config

__all__ = ["ConfigError", "GridConfig", "SweepConfig", "did_you_mean", "register_schema",
           "to_sweep_config"]
