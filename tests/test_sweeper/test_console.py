"""The commands feel like their ecosystem: a `sweeper` console script, `--version` everywhere,
Hydra's shell completion, the grid's values in `--help`, and ε written one way."""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "sweeper"  # where `pip install -e .` puts it
# What `grid.attack` and `grid.policy` take (README's tables), by hand.
ATTACK_VALUES = {"lira_online", "lira_offline", "lira_global", "loss", "loss_randomized", "shokri",
                 "merlin", "morgan", "pdtp", "always_member", "output_threshold", "rmia",
                 "rmia_offline", "canary_input_loss", "canary_input_lira", "canary_gradient_final",
                 "canary_gradient_iterates", "canary_crafted_final", "qmia", "base",
                 "rmia_low_cost"}
POLICY_VALUES = {"quantile_max", "calibrated"}


def version() -> str:
    return importlib.metadata.version("sweeper")


def run(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_the_console_script_is_declared_and_dispatches(capsys):
    (entry,) = [e for e in importlib.metadata.entry_points(group="console_scripts")
                if e.name == "sweeper"]
    main = entry.load()
    with pytest.raises(SystemExit) as done:
        main(["bounds", "precision", "--epsilon", "2", "--p", "0.01", "--json"])
    assert done.value.code == 0
    # U = p·e²/(p·e² + 1 − p) at p = 0.01: 0.0694532 (the 2022 paper's 6.9 %)
    assert json.loads(capsys.readouterr().out)["rows"][0]["upper"] == pytest.approx(0.0694532, abs=1e-7)
    for tool in ("frontier", "report"):
        with pytest.raises(SystemExit) as done:
            main([tool, "--help"])
        assert done.value.code == 0 and f"usage: sweeper {tool}" in capsys.readouterr().out


@pytest.mark.parametrize("module", ["sweeper.cli.frontier_command", "sweeper.cli.bounds_command",
                                    "sweeper.cli.sync_command", "sweeper.cli.report_command",
                                    "sweeper.cli.doc_figures_command"])
def test_every_tool_prints_sweepers_version(module, capsys):
    tool = __import__(module, fromlist=["main"])
    try:  # argparse's version action exits 0; `bounds` turns its exits into return codes
        code = tool.main(["--version"])
    except SystemExit as done:
        code = done.code
    assert code == 0 and capsys.readouterr().out.strip() == f"sweeper {version()}"


def test_the_sweep_command_prints_sweepers_version_not_hydras():
    done = run(sys.executable, "-m", "sweeper", "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"sweeper {version()}"


def test_help_lists_the_values_the_grid_takes():
    done = run(sys.executable, "-m", "sweeper", "--help")
    assert done.returncode == 0, done.stderr
    lines = {line.split(":", 1)[0].strip(): line.split(":", 1)[1]
             for line in done.stdout.splitlines() if line.strip().startswith("grid.")
             and ":" in line and "," in line}
    assert {v.strip() for v in lines["grid.attack"].split(",")} == ATTACK_VALUES
    assert {v.strip() for v in lines["grid.policy"].split(",")} == POLICY_VALUES


@pytest.mark.skipif(not SCRIPT.exists(), reason="the project is not installed (pip install -e .)")
def test_installed_script_runs_and_completes_in_bash():
    done = run(str(SCRIPT), "--version")
    assert done.returncode == 0 and done.stdout.strip() == f"sweeper {version()}"
    done = run(str(SCRIPT), "bounds", "--version")
    assert done.stdout.strip() == f"sweeper {version()}"
    # Hydra's bash completion: the installed function completes `sweeper`, and asks it back.
    done = run(str(SCRIPT), "-sc", "install=bash")
    assert done.returncode == 0 and done.stdout.rstrip().endswith("hydra_bash_completion sweeper")
    done = run(str(SCRIPT), "-sc", "query=bash",
               env={"COMP_LINE": "sweeper grid.att", "COMP_POINT": "16"})
    assert done.returncode == 0 and done.stdout.split() == ["grid.attack."], done.stderr
    done = run(str(SCRIPT), "-sc", "query=bash",
               env={"COMP_LINE": "sweeper +experiment=cifar10_l", "COMP_POINT": "29"})
    assert done.stdout.split() == ["+experiment=cifar10_lira"]


def test_epsilon_names_in_task_and_run_names_read_the_same():
    """The Ray dashboard's task names and MLflow's run names write ∞ as ∞, like the tables."""
    from sweeper.runner import cell_label
    from sweeper.tracking.run_records import cell_run_name

    cell = SimpleNamespace(attack="lira_online", policy="quantile_max", epsilon=math.inf,
                           delta=1e-5, p=0.5, trial=0, recipe=(("max_grad_norm", 0.5),), swept=())
    assert cell_label(cell) == "lira_online ε=∞ δ=1e-05 p=0.5 trial=0"
    assert cell_run_name(vars(cell)) == "ε=∞ p=0.5 t0 · lira_online quantile_max δ=1e-05"
    cell.epsilon = 8.0
    assert "ε=8 " in cell_label(cell) and "ε=8 " in cell_run_name(vars(cell))
    cell.swept = ("max_grad_norm",)  # a training setting the grid sweeps tells cells apart
    assert cell_label(cell) == "lira_online ε=8 δ=1e-05 p=0.5 C=0.5 trial=0"


def test_the_log_is_shown_on_the_terminal_only_while_a_command_works(capsys):
    """`sweeper.console.shown`: status lines on stdout as they are, problems on stderr with their
    level; outside it the sweeper logs nothing to the terminal at INFO, and the logger is as it
    was (a command called in-process leaves no trace)."""
    import logging

    from sweeper.console import forwarded, shown

    log = logging.getLogger("sweeper.runner")
    root = logging.getLogger("sweeper")
    before = (root.level, root.propagate, list(root.handlers))
    with shown():
        log.info("sweep 'x': 4 cells")
        log.warning("MLflow tracking at %s is unavailable", "sqlite:///m.db")
    out, err = capsys.readouterr()
    assert out == "sweep 'x': 4 cells\n"
    assert err == "warning: MLflow tracking at sqlite:///m.db is unavailable\n"
    assert (root.level, root.propagate, list(root.handlers)) == before
    log.info("not shown")
    assert capsys.readouterr().out == ""
    said: list[str] = []
    with forwarded(said.append):
        log.info("recomputed 1 of 1 cells")
        log.warning("the results dataset was not written")
    assert said == ["recomputed 1 of 1 cells", "warning: the results dataset was not written"]
    assert (root.level, root.propagate, list(root.handlers)) == before


PROGRESS_PROGRAM = """
from sweeper.console import Progress, shown
with shown(), Progress(20, "cells computed", "cell") as bar:
    for _ in range(20):
        bar.update()
"""


def output_of(program: str, tty: bool) -> str:
    """What `program` writes to stdout and stderr together, both a pipe or both a terminal."""
    import fcntl
    import pty
    import struct
    import termios

    if not tty:
        done = subprocess.run([sys.executable, "-c", program], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, cwd=REPO, timeout=60)
        return done.stdout.decode()
    leader, follower = pty.openpty()
    # A terminal 100 columns wide: tqdm sizes its bar to it, and draws nothing on a 0-wide one.
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=follower, stderr=follower,
                            stdin=subprocess.DEVNULL, cwd=REPO)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the program closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode()


def test_progress_is_a_bar_on_a_terminal_and_plain_lines_in_a_log():
    """Off a terminal no escape code and no carriage return, a status line each tenth of the way
    (every 2 of 20 here); on one, tqdm's bar, redrawn in place, and no status lines."""
    logged = output_of(PROGRESS_PROGRAM, tty=False)
    assert "\x1b" not in logged and "\r" not in logged
    assert logged.splitlines() == [f"cells computed: {n}/20 ({5 * n} %)" for n in range(2, 21, 2)]
    drawn = output_of(PROGRESS_PROGRAM, tty=True)
    assert "\r" in drawn and "20/20" in drawn and "cells computed: 2/20 (10 %)" not in drawn
