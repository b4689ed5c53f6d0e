"""The layers point one way: `jobs/` (work inside tasks) never imports `sweeper/` (orchestration),
and no module of either imports itself back through others.

Why a test.  Both rules are easy to break by one convenient import, and nothing else fails when
they are: a cycle only bites when the import order changes, a `jobs -> sweeper` edge only when a
worker lacks the driver's dependencies.

Which imports count.  The graph is read from the source with `ast`, not by importing it, so it
sees every `import` and `from ... import` statement wherever it stands: at module level, and
inside functions, methods and `if` blocks as well.  A function-level import is still a
dependency of the module (it runs the first time the function does, and deferring it is how a
cycle is usually hidden rather than removed), so it counts as an edge like any other.
`from package import name` is an edge to `package.name` when that is a module, else to
`package`; relative imports are resolved against the importing module.  Not counted: the parent
packages Python imports implicitly before a submodule (`sweeper.bounds.thudi` runs
`sweeper/bounds/__init__.py` first; counting that would make every package that re-exports its
submodules a cycle), imports of anything outside `sweeper/` and `jobs/`, and imports by string
(`importlib.import_module`), which `ast` cannot follow.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("jobs", "sweeper")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the two layers, by dotted name."""
    return {module_name(path): path
            for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (at `path`) imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                          for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:  # `import a.b.c` of a name inside a.b
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imported(name, path, set(found)) for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path (first module repeated at the end) per strongly connected component of more
    than one module (Tarjan's algorithm), in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted((_cycle_through(graph, component) for component in components), key=str)


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def test_the_graph_sees_module_and_function_level_imports():
    graph = import_graph()
    assert {"sweeper.bounds.thudi", "sweeper.bounds.proven"} <= graph["sweeper.bounds"]
    assert "sweeper.bounds.plots" in graph["sweeper.cli.bounds_command"]  # imported inside a function
    assert "jobs.datasets.core" in graph["jobs.datasets.images"]
    # And the cycle search finds a cycle where there is one, with its path.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_jobs_never_imports_sweeper():
    upward = sorted(f"{name} -> {target}" for name, targets in import_graph().items()
                    if name.split(".")[0] == "jobs" for target in targets
                    if target.split(".")[0] == "sweeper")
    assert not upward, ("jobs/ (work inside tasks) imports sweeper/ (orchestration):\n"
                        + "\n".join(upward))


def engine_reaches_outside(graph: dict[str, set[str]]) -> list[str]:
    """Imports from `jobs.engine` into `jobs.attacks` or `jobs.audits`, as "module -> target"."""
    return sorted(f"{name} -> {target}" for name, targets in graph.items()
                  if name.startswith("jobs.engine") for target in targets
                  if target.split(".")[:2] in (["jobs", "attacks"], ["jobs", "audits"]))


def test_the_engine_imports_no_attack_and_no_audit():
    """Issue 53: `jobs.engine` is the part that must equal Opacus, audited alone; the attacks and
    audits read what it produces (canary columns: `jobs.engine.canary_columns`), never the
    reverse, so a change to an attack cannot change how a model is trained."""
    planted = {"jobs.engine.canaries": {"jobs.attacks.contract"}, "jobs.attacks.contract": set()}
    assert engine_reaches_outside(planted) == ["jobs.engine.canaries -> jobs.attacks.contract"]
    found = engine_reaches_outside(import_graph())
    assert not found, "the DP engine imports attacks or audits:\n" + "\n".join(found)


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


def how_it_works() -> str:
    """docs/how-it-works.md: the map a newcomer reads to find each stage."""
    return (ROOT / "docs" / "how-it-works.md").read_text()


def test_how_it_works_names_every_module_where_it_lives():
    """Every module of `sweeper/` and `jobs/` is named in *How it works*, by its dotted name or
    its package's (a package named whole covers its modules); every dotted name it gives is a
    module that exists.  So the map cannot fall behind a move, in either direction."""
    section = how_it_works()
    known = set(modules())
    named = {name for name in known - set(LAYERS)
             if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", section)}
    unnamed = sorted(name for name in known - set(LAYERS)
                     if not any(name == n or name.startswith(n + ".") for n in named))
    assert not unnamed, f"modules missing from docs/how-it-works.md: {unnamed}"
    dotted = set(re.findall(r"\b((?:sweeper|jobs)(?:\.\w+)+)", section))
    stale = sorted(name for name in dotted if name not in known  # a module, or a name inside one:
                   and name.rpartition(".")[0] not in known - set(LAYERS))
    assert not stale, f"docs/how-it-works.md names modules that do not exist: {stale}"


def room(name: str) -> str:
    """The unit a reader sees in `sweeper/`: a subpackage whole (`sweeper.tracking`), else the
    top-level module itself; `jobs/` likewise (`jobs.engine`, `jobs.datasets`, `jobs.models`)."""
    parts = name.split(".")
    subpackage = ".".join(parts[:2])
    return subpackage if (ROOT / subpackage.replace(".", "/")).is_dir() else name


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for name, targets in graph.items():
        rooms.setdefault(room(name), set()).update(
            room(target) for target in targets if room(target) != room(name))
    return rooms


def test_subpackages_import_one_way():
    """Issue 42: `sweeper/` is grouped by what it talks to (MLflow in `sweeper.tracking`, Ray in
    `sweeper.cluster`, the configuration checks in `sweeper.checks`, ...).  A group is only a
    layer if no import runs back into it from what it imports: taken whole, the subpackages and
    the top-level modules form no cycle either."""
    # The collapse is what finds such a cycle: two modules apart, one cycle once grouped.
    planted = {"sweeper.tracking.recorder": {"sweeper.frontier"},
               "sweeper.frontier": {"sweeper.tracking.locations"},
               "sweeper.tracking.locations": set()}
    assert cycles(planted) == []
    assert cycles(room_graph(planted)) == [["sweeper.frontier", "sweeper.tracking",
                                            "sweeper.frontier"]]
    found = cycles(room_graph(import_graph()))
    assert not found, "cycles between groups:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_two_modules_share_a_name():
    """A basename says what a module is wherever it is read (a traceback, an editor's tab, a
    log line's logger): in `sweeper/` and `jobs/` no two modules share one (`__init__` and
    `__main__` apart)."""
    # A planted pair is found, and a package's face and entry point are no pair.
    planted = {"sweeper.reports.thudi": Path("sweeper/reports/thudi.py"),
               "sweeper.bounds.thudi": Path("sweeper/bounds/thudi.py"),
               "sweeper.bounds": Path("sweeper/bounds/__init__.py"),
               "sweeper.reports": Path("sweeper/reports/__init__.py")}
    assert shared_names(planted) == {"thudi": ["sweeper.reports.thudi", "sweeper.bounds.thudi"]}
    shared = shared_names(modules())
    assert not shared, f"modules that share a name: {shared}"


def shared_names(found: dict[str, Path]) -> dict[str, list[str]]:
    """Each basename more than one module has (`__init__`, `__main__` apart), with theirs."""
    seen: dict[str, list[str]] = {}
    for name, path in found.items():
        if path.stem not in ("__init__", "__main__"):
            seen.setdefault(path.stem, []).append(name)
    return {stem: names for stem, names in seen.items() if len(names) > 1}


#: The modules outside `sweeper/cli/` that read a command line, each with why it is there.
COMMAND_LINES_ELSEWHERE = {
    "sweeper.__main__": "the sweep's own front end: `python -m sweeper` needs it there",
    "sweeper.checks.hydra_adapter": "reads Hydra's command line for the preflight (Hydra's parser "
                                    "is argparse's)",
    "sweeper.cluster.watchdog": "a script of its own, run as `python -I watchdog.py MARKER`",
}


def reads_a_command_line(source: str) -> bool:
    """The module imports argparse (anywhere) or defines a `main` (a command's entry point)."""
    tree = ast.parse(source)
    if any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
        return True
    return any(isinstance(node, ast.Import) and any(alias.name == "argparse" for alias in node.names)
               or isinstance(node, ast.ImportFrom) and node.module == "argparse"
               for node in ast.walk(tree))


def test_the_command_lines_are_read_in_sweeper_cli_alone():
    """Issue 53: the commands' front ends live in `sweeper/cli/`, apart from the library they
    drive (`sweeper.frontier`, `sweeper.html_report`, `sweeper.tracking.sync`,
    `sweeper.store.columns`, `sweeper.doc_figures`), which a notebook imports without argparse.
    Each exception is named with why, and is still one."""
    # A planted front end is found, wherever its argparse import stands; a library is not.
    assert reads_a_command_line("def load():\n    import argparse\n")
    assert reads_a_command_line("from argparse import ArgumentParser\n")
    assert reads_a_command_line("def main(argv=None):\n    return 0\n")
    assert not reads_a_command_line("def load_frontier(experiment):\n    return experiment\n")
    found = {name for name, path in modules().items()
             if not name.startswith("sweeper.cli") and reads_a_command_line(path.read_text())}
    assert found - set(COMMAND_LINES_ELSEWHERE) == set(), "front ends outside sweeper/cli/"
    assert set(COMMAND_LINES_ELSEWHERE) - found == set(), "exceptions that are none any more"
