"""`python -m sweeper [+experiment=NAME] [overrides]`: compose, validate and run a sweep.

With no experiment the quickstart runs: real MNIST digits that install with the package, on
the CPU, in minutes.  Hydra composes the config (`conf/`); `--help` lists every group.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from jobs.data import DatasetUnavailable
from sweeper.config import ConfigError, register_schema, to_sweep_config
from sweeper.frontier import format_table
from sweeper.runner import run_sweep

register_schema()


def _report(result) -> None:
    print()
    print(format_table(result.results))
    print()
    print(f"done in {result.seconds:.1f} s: trained {result.models_trained} of "
          f"{result.models_total} models, computed {result.cells_computed} of "
          f"{result.cells_total} cells")
    print(f"results (Parquet): {result.sweep_dir / 'cells'}")
    if result.plot_path is not None:
        print(f"frontier plot:     {result.plot_path}")
        print(f"frontier table:    {result.csv_path}")
    print(f"MLflow:            mlflow ui --backend-store-uri {result.tracking_uri} --host 127.0.0.1")
    violations = int(result.results["violation"].sum()) if not result.results.empty else 0
    if violations:
        print(f"WARNING: {violations} cell(s) measured a precision above the bound: "
              "a bug in training or accounting.", file=sys.stderr)
    for label, reason in result.failures:
        print(f"FAILED {label}: {reason}", file=sys.stderr)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(raw: DictConfig) -> None:
    try:
        cfg = to_sweep_config(raw)
        result = run_sweep(cfg)
    except (ConfigError, DatasetUnavailable) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    _report(result)
    if result.failures:
        sys.exit(1)


def _with_default_experiment(argv: list[str]) -> list[str]:
    """Run the quickstart when the command line names no experiment."""
    names_one = any(a.lstrip("+~").startswith("experiment=") for a in argv)
    asks_help = any(a in ("--help", "-h", "--hydra-help", "--info", "-i") or a.startswith("--info")
                    for a in argv)
    return argv if names_one or asks_help else [*argv, "+experiment=quickstart"]


if __name__ == "__main__":
    sys.argv = [sys.argv[0], *_with_default_experiment(sys.argv[1:])]
    main()
