"""The checkout guard (`testkit.checkout_guard`) sees a file written into a checkout, and only
that: a real git repository in a temporary folder, a file planted in it."""

from __future__ import annotations

import subprocess

from testkit.checkout_guard import untracked


def test_a_file_written_into_a_checkout_is_seen_and_an_ignored_one_is_not(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("runs/\n")
    before = untracked(tmp_path)
    assert before == {".gitignore"}
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "mlflow.db").write_bytes(b"ignored")  # ignored: the demo's store
    (tmp_path / "mlruns" / "1").mkdir(parents=True)
    (tmp_path / "mlruns" / "1" / "meta.yaml").write_text("written through")
    assert untracked(tmp_path) - before == {"mlruns/1/meta.yaml"}
    assert untracked(tmp_path / "no such folder") is None  # no checkout: nothing to guard
