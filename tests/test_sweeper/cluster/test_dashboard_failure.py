"""`sweeper.cluster.dashboard.dashboard_failure` on the errors Ray raises when its dashboard does not
start, written as `ray._private.services.start_api_server` writes them: the last lines of the
dashboard's log in the exception, which names the log.  The real sweeps that meet them are
`tests/faults/test_dashboard_start.py`; here the cases those cannot stage cheaply."""

from __future__ import annotations

from pathlib import Path

from sweeper.cluster.dashboard import dashboard_failure


def ray_error(logs: Path, *lines: str) -> str:
    """What Ray raises: the log's last lines, then the sentence naming the log."""
    return "\n" + "\n".join([*lines, f"The last 20 lines of {logs / 'dashboard.log'} (it contains "
                                       "the error message from the dashboard): "])


def test_the_default_ports_all_taken_are_named_as_such(tmp_path):
    said = ray_error(tmp_path, "Traceback (most recent call last):",
                     "Exception: Failed to find a valid port for dashboard after 50 retries: "
                     "[Errno 98] error while attempting to bind on address ('127.0.0.1', 8315): "
                     "address already in use")
    line = dashboard_failure(said, 8265)
    assert line.startswith("cluster.dashboard_port=8265: Ray's dashboard could not start: port "
                           "8265 and the next ports Ray tried are taken"), line


def test_a_module_the_dashboard_missed_is_found_in_its_stderr(tmp_path):
    """A dashboard that died before its logger started: its log says nothing of it, its
    dashboard.err (the process's stderr, beside the log Ray names) does."""
    (tmp_path / "dashboard.err").write_text("Traceback (most recent call last):\n"
                                            "ModuleNotFoundError: No module named 'aiohttp_cors'\n")
    line = dashboard_failure(ray_error(tmp_path, "2026-01-01 INFO dashboard.py:1 -- starting"), 0)
    assert "the Python module 'aiohttp_cors' it needs is missing" in line, line
    assert str(tmp_path) in line and "port" not in line.split("(its log")[0]


def test_any_other_failure_says_the_logs_last_error_line(tmp_path):
    said = ray_error(tmp_path, "Traceback (most recent call last):",
                     "RuntimeError: the GCS went away", "INFO shutting down")
    line = dashboard_failure(said, 8265)
    assert line.startswith("cluster.include_dashboard=true: Ray's dashboard could not start "
                           "(RuntimeError: the GCS went away)"), line
    assert "cluster.include_dashboard=false" in line and "taken" not in line
