"""The user-facing commands, run as a person runs them (subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_cifar10_without_data_stops_before_ray_with_the_files_to_place(tmp_path):
    data_dir = tmp_path / "data"
    # The experiment asks for a quarter GPU; without one, local Ray is refused that first.
    result = run("-m", "sweeper", "+experiment=cifar10_lira", f"dataset.data_dir={data_dir}",
                 f"store.root={tmp_path / 'runs'}", "resources.train.num_gpus=0", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    message = result.stderr
    assert "'cifar10'" in message
    assert str(data_dir / "cifar10" / "cifar-10-python.tar.gz") in message
    assert "c58f30108f718f92721af3b95e74349a" in message
    # Refused before any work: no Ray started, nothing written.
    assert "Ray dashboard" not in result.stdout
    assert not (tmp_path / "runs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_bad_config_is_refused_with_every_problem_named(tmp_path):
    result = run("-m", "sweeper", "grid.p=[0,1.5]", "grid.attack=[lira,loss]", "shadow.count=3",
                 f"store.root={tmp_path / 'runs'}", cwd=tmp_path)
    assert result.returncode == 2
    for fragment in ("grid.p: 0", "grid.p: 1.5", "'lira' is unknown", "shadow.count=3"):
        assert fragment in result.stderr
    assert not (tmp_path / "runs").exists()


def test_help_explains_the_command(tmp_path):
    result = run("-m", "sweeper", "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "+experiment=NAME" in result.stdout and "python -m sweeper.frontier" in result.stdout
    frontier = run("-m", "sweeper.frontier", "--help", cwd=tmp_path)
    assert frontier.returncode == 0 and "--run-dir" in frontier.stdout
