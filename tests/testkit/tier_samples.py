"""Tests never run (the file's name is no test module's): one of each way a test shows its
tier, for tests/suite/test_tiers.py to classify with `testkit.tiers.tier_of`."""

from __future__ import annotations

import subprocess
import sys

import pytest


def start_python() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_in_process(tmp_path):
    assert tmp_path.is_dir()


def test_on_the_session_ray(ray_local):
    assert ray_local.is_initialized()


def test_with_a_server(mlflow_server):
    assert mlflow_server


def test_starting_a_process_itself():
    subprocess.run(["true"], check=True)


def test_starting_one_through_a_helper():
    start_python()


@pytest.mark.unit
def test_marked_unit_whatever_it_runs():
    start_python()


@pytest.mark.process
def test_marked_process():
    pass
