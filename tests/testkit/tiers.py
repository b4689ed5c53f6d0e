"""The suite's tiers (tests/README.md): which a test is in, from what it uses, so a test added
later lands in its tier without anyone marking it.  tests/conftest.py marks every test with
`tier_of`; kept here, not in a conftest, so a test can import it whatever other conftest
(tests/gpu's) is on the path under the same module name."""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]

#: Tiers by what a test needs, cheapest first; `make check` runs `unit`, `make test` all four.
TIERS = {
    "unit": "in process: no Ray, no server, no child process (the default)",
    "ray": "the one session Ray (`ray_local`, `ray_dashboard`) and nothing else it starts",
    "process": "real processes: a command as a subprocess, its own Ray cluster, a server",
    "cluster": "the cluster in a box: Ray nodes, a driver and servers in namespaces of their own "
               "(root; tests/testkit/cluster_box.py), run alone after the other tiers",
}
#: What `@pytest.mark.serial` says: `make test` runs the other `ray` and `process` tests on two
#: pytest-xdist workers, these alone, one at a time, after them (tests/README.md).
SERIAL = ("runs alone, not beside another test: it times a signal or a kill against the work "
          "of a sweep, bounds a wait in seconds, or holds a fixed port")
#: Fixtures that put a test in a tier above `unit` (the one it needs most wins).
TIER_FIXTURES = {
    "ray_local": "ray", "ray_dashboard": "ray",
    "ray_cluster_factory": "process", "two_node_cluster": "process", "mlflow_server": "process",
    "s3_server": "process", "procs": "process",
}
#: Folders whose every test is of a tier: the fault tests break real processes.
TIER_FOLDERS = {TESTS_DIR / "faults": "process", TESTS_DIR / "cluster": "cluster"}
#: What starts a process, in a test's own code, its fixtures' or the module helpers it calls.
STARTS_A_PROCESS = re.compile(r"\bsubprocess\.|\bPopen\(|\bsys\.executable\b|\bos\.fork\(")
#: What a library runs once to learn about the machine, no process of the test's, so no reason
#: to leave the unit tier: `ctypes.util.find_library`'s tools, git (MLflow tags a run with the
#: source's commit through GitPython).  Each an argv's first words.
LIBRARY_PROBES = {("ldconfig",), ("gcc",), ("cc",), ("ld",), ("objdump",), ("uname",), ("git",)}
#: pytest-timeout's default per tier (seconds), where a test names no `timeout` of its own: each
#: about three times its tier's slowest test at load 15-20 on 2 cores (the unit tier's: 101 s,
#: the DP audit; process tests ran 46 s quiet, refusals 11 times slower at load 20), so only a
#: hang reaches it, with its traceback.
TIER_TIMEOUT_S = {"unit": 300, "ray": 600, "process": 900, "cluster": 900}


def _rank(tier: str) -> int:
    return list(TIERS).index(tier)


@functools.cache
def _own_piece(obj) -> tuple[bool, tuple]:
    """Whether `obj`'s own source starts a process, and the functions of its module it names:
    one function's share of `_starts_a_process`, read once per session (`inspect.getsource`
    tokenizes its whole block each time, and a fixture or helper serves many tests)."""
    try:
        source = inspect.getsource(obj)
        path = Path(inspect.getfile(obj)).resolve()
    except (OSError, TypeError):
        return False, ()
    if TESTS_DIR not in path.parents:  # library code: its processes are its tests' business
        return False, ()
    names = set(obj.__code__.co_names)
    for const in obj.__code__.co_consts:  # nested functions and lambdas
        if inspect.iscode(const):
            names |= set(const.co_names)
    scope = obj.__globals__
    return (STARTS_A_PROCESS.search(source) is not None,
            tuple(scope[name] for name in sorted(names) if inspect.isfunction(scope.get(name))))


def _starts_a_process(obj, seen: set) -> bool:
    """Whether `obj`'s source, or that of a function of the tests' own modules it names
    (followed through those functions), starts a process: what a test runs besides library
    code."""
    obj = inspect.unwrap(getattr(obj, "__func__", obj))  # a test class's method too
    if obj in seen or not inspect.isfunction(obj):
        return False
    seen.add(obj)
    starts, named = _own_piece(obj)
    return starts or any(_starts_a_process(function, seen) for function in named)


def tier_of(item: pytest.Item) -> str:
    """A test's tier: a `unit`/`ray`/`process` marker of its own; else its folder's; else the
    most its fixtures need; else `process` if its own code starts a process; else `unit`."""
    explicit = [m.name for m in item.iter_markers() if m.name in TIERS]
    if explicit:
        return max(explicit, key=_rank)
    path = Path(str(item.path)).resolve()
    for folder, tier in TIER_FOLDERS.items():
        if folder in path.parents:
            return tier
    tier = "unit"
    info = getattr(item, "_fixtureinfo", None)
    names = info.names_closure if info is not None else []
    for name in names:
        tier = max(tier, TIER_FIXTURES.get(name, "unit"), key=_rank)
    if tier == "process" or not isinstance(item, pytest.Function):
        return tier
    seen: set = set()
    if _starts_a_process(item.function, seen):
        return "process"
    for name in names:
        if name == "_unit_tests_start_no_process":  # the guard names what it guards against
            continue
        if any(_starts_a_process(fixturedef.func, seen)
               for fixturedef in (info.name2fixturedefs.get(name) or ())):
            return "process"
    return tier
