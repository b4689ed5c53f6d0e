"""Shared fixtures: one real local Ray instance for the whole session, tiny sweep configs, the
command's signal handling; and the suite's tiers (tests/README.md), marked here from what each
test uses, so a test added later lands in its tier without anyone marking it."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.tiers import LIBRARY_PROBES, SERIAL, TIER_TIMEOUT_S, TIERS, tier_of

#: The fault tests' fixtures (real Ray cluster, MLflow and S3 servers, process helpers).  pytest
#: takes `pytest_plugins` from the root conftest only; `testkit` is importable because tests/ is
#: on sys.path (pyproject.toml's `pythonpath`).
pytest_plugins = ["testkit.fault_fixtures", "testkit.checkout_guard"]

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
TESTS_DIR = Path(__file__).resolve().parent

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray (2 CPUs), shared by every test that runs a sweep.  Its dashboard (on
    loopback, any free port) serves the state API that fault tests count task attempts with."""
    import ray

    context = ray.init(address="local", num_cpus=2, include_dashboard=True,
                       dashboard_host="127.0.0.1", dashboard_port=0, configure_logging=False)
    _RAY_DASHBOARD["url"] = f"http://{context.dashboard_url}"
    yield ray
    ray.shutdown()


_RAY_DASHBOARD: dict[str, str] = {}


@pytest.fixture(scope="session")
def ray_dashboard(ray_local) -> str:
    """The session Ray's dashboard URL: the address `ray.util.state` queries take."""
    return _RAY_DASHBOARD["url"]


def build_tiny_config(root):
    """A sweep small enough for seconds: 240-record pool, 1 epoch, 2 shadows."""
    from sweeper.config import SweepConfig

    cfg = SweepConfig()
    cfg.name = "tiny"
    cfg.dataset.pool_size = 240
    cfg.dataset.test_size = 200
    cfg.dataset.eval_records = 120
    cfg.train.epochs = 1
    cfg.train.batch_size = 64
    cfg.train.checkpoint_seconds = 0.0  # every epoch: the fault tests kill between epochs
    cfg.shadow.count = 2
    cfg.grid.epsilon = [4.0, math.inf]
    cfg.grid.delta = [1e-5]
    cfg.grid.p = [0.3, 0.7]
    cfg.grid.attack = ["lira_online", "lira_offline", "loss", "shokri", "always_member"]
    cfg.grid.trial = [0]  # one target per cell, whatever the quickstart's trials
    cfg.store.root = str(root / "runs")
    cfg.cluster.include_dashboard = False
    return cfg


@pytest.fixture(scope="session")
def make_tiny_config():
    return build_tiny_config


@pytest.fixture
def tiny_config(tmp_path):
    return build_tiny_config(tmp_path)


def compose_sweep_config(experiment: str, overrides: list[str] = ()):
    """The validated SweepConfig that `python -m sweeper +experiment=NAME overrides…` would run."""
    from hydra import compose, initialize_config_dir

    from sweeper.config import register_schema, to_sweep_config

    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        raw = compose(config_name="config", overrides=[f"+experiment={experiment}", *overrides])
    return to_sweep_config(raw)


@pytest.fixture(scope="session")
def compose_config():
    return compose_sweep_config


def tiny_overrides(store_root: str, name: str = "tiny", **overrides) -> list[str]:
    """`build_tiny_config` as command-line overrides, for tests that run `python -m sweeper`."""
    values = {
        # The quickstart sizes pools by dataset.members; these set the pool's size instead.
        "name": name, "dataset.members": "null", "dataset.pool_size": 240, "dataset.test_size": 200,
        "dataset.eval_records": 120, "train.epochs": 1, "train.batch_size": 64,
        "train.checkpoint_seconds": 0,
        "shadow.count": 2, "grid.epsilon": "[4,.inf]", "grid.delta": "[1e-5]",
        "grid.p": "[0.3,0.7]", "grid.attack": "[lira_online,lira_offline,loss,shokri,always_member]",
        "grid.trial": "[0]", "store.root": f"'{store_root}'", "cluster.include_dashboard": "false",
        "cluster.num_cpus": 2, **overrides,
    }
    return [f"{key}={value}" for key, value in values.items()]


@pytest.fixture(scope="session")
def make_tiny_overrides():
    return tiny_overrides


@pytest.fixture
def command_signal_handlers():
    """The command's SIGINT/SIGTERM handling (`sweeper.interrupts.install`) in this process, as
    `python -m sweeper` sets it; pytest's handlers and the module's state come back after."""
    import signal

    from sweeper import interrupts

    saved = ({s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)},
             sys.unraisablehook, dict(interrupts._state))
    interrupts.install()
    try:
        yield interrupts
    finally:
        handlers, hook, state = saved
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        sys.unraisablehook = hook
        interrupts._state.clear()
        interrupts._state.update(state)


def pytest_configure(config: pytest.Config) -> None:
    for tier, what in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: tier -- {what}")
    config.addinivalue_line("markers", f"serial: {SERIAL}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        if item.get_closest_marker(tier) is None:
            item.add_marker(tier)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIER_TIMEOUT_S[tier]))


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
    """A test of the `unit` tier that starts a process fails, naming the tier it belongs in:
    `make check` stays in process however a test is written (mark it `process` explicitly)."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(self, args, *rest, **kwargs):
        words = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
        words[0] = Path(words[0]).name
        if any(tuple(words[:len(probe)]) == probe for probe in LIBRARY_PROBES):
            return start(self, args, *rest, **kwargs)
        pytest.fail(f"{request.node.nodeid} starts a process ({args!r}) but is in the unit "
                    "tier: mark it @pytest.mark.process (tests/README.md)", pytrace=False)

    start = subprocess.Popen._execute_child
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
