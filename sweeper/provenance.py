"""Where a sweep's numbers came from: each run's code (commit, and whether its tree was clean),
packages, machine, wall by task kind and models trained, and the dataset's pinned files.

A reviewer of a sweep's report (`sweeper.html_report`) asks which code produced it and on what;
the results table cannot say, since a sweep that resumes or grows mixes runs.  So every run that
computes something appends its record to `sweeps/<name>/provenance.json` (`record_run`), and the
report lists them all.  The commit is sweeper's own checkout's (`git`, as MLflow's run tags read
it); outside a checkout it is unknown, and said so.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from sweeper.task_times import KindTime

#: The packages whose versions decide a sweep's numbers or its figures.
PACKAGES = ("sweeper", "torch", "opacus", "numpy", "scipy", "pandas", "pyarrow", "ray", "mlflow",
            "hydra-core", "matplotlib", "mlxtend")
#: How many runs a record keeps (the latest): a sweep rerun for months stays a small file.
KEPT_RUNS = 50


def code_state(checkout: Optional[Path] = None) -> tuple[Optional[str], Optional[bool]]:
    """(commit, clean) of the git checkout holding sweeper's code; (None, None) outside one.
    Clean: no tracked file differs from the commit (untracked files are not code that ran)."""
    folder = str(checkout or Path(__file__).resolve().parent)
    try:
        commit = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", folder, "status", "--porcelain",
                                  "--untracked-files=no"], capture_output=True, text=True,
                                 timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit or None, not changed


def environment() -> dict[str, Any]:
    """The interpreter, platform, CPUs and `PACKAGES`' versions (absent ones left out)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "packages": versions}


def dataset_record(config: dict[str, Any]) -> dict[str, Any]:
    """The dataset a sweep trained on, as its registration pins it: the files with their MD5s,
    or where its records come from when no file is read (shipped with a package, synthetic)."""
    from jobs.datasets import DATASETS

    dataset = config.get("dataset", {}) if isinstance(config, dict) else {}
    name = str(dataset.get("name", ""))
    if dataset.get("synthetic"):
        return {"name": name, "files": [],
                "source": f"synthetic records of {name}'s shape (seed {config.get('seed')})"}
    spec = DATASETS.get(name)
    files = [{"name": f.filename, "md5": f.md5} for f in spec.files] if spec is not None else []
    return {"name": name, "files": files,
            "source": "" if files else "records that ship with an installed package (no file is "
                                       "downloaded; its version is under the packages)"}


def run_record(models_trained: int, wall_seconds: float, task_times: dict[str, KindTime],
               code: tuple[Optional[str], Optional[bool]]) -> dict[str, Any]:
    """One run's record: when it finished, its code (`code_state` when the run started: the
    code it imported, whatever the checkout became since), environment, models trained, wall,
    and each task kind's wall (`sweeper.task_times`)."""
    commit, clean = code
    return {"finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit, "clean": clean, "models_trained": models_trained,
            "wall_seconds": round(wall_seconds, 1),
            "task_times": {kind: {"wall": round(t.wall, 1), "task_seconds": round(t.task_seconds, 1),
                                  "tasks": t.tasks} for kind, t in task_times.items()},
            "environment": environment()}


def record_run(previous: Optional[dict[str, Any]], run: dict[str, Any],
               config: dict[str, Any]) -> dict[str, Any]:
    """The sweep's provenance with `run` appended (the `KEPT_RUNS` latest kept) and its dataset."""
    runs = [*(previous or {}).get("runs", []), run][-KEPT_RUNS:]
    return {"runs": runs, "dataset": dataset_record(config)}
