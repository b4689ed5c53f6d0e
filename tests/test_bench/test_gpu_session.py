"""`bench/gpu_session.sh` as a user on a bare GPU machine meets it (issue 48.1): the bundle it
sources stays on the path, and a part that fails stops it with one line naming the part and
why, exit 1.  The bare machine is this checkout's interpreter with the bundle's modules hidden
(`testkit.hidden_modules`) and a bundle whose install.sh puts copies of some of them first on
PYTHONPATH, as the real one does (`../shared/gpu/make-bundle.sh`)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from testkit.hidden_modules import hiding_site

ROOT = Path(__file__).resolve().parents[2]
SITE_PACKAGES = sysconfig.get_paths()["purelib"]

#: What the bundle's install.sh does to the path (its own site first, then the checkout).
INSTALL = '''_d=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PYTHONPATH=$_d/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
'''


def _session(tmp_path: Path, hidden: str, bundled: tuple[str, ...]) -> subprocess.CompletedProcess:
    """The script on a machine without `hidden`, with a bundle that holds `bundled`."""
    bundle = tmp_path / "gpudeps"
    (bundle / "site").mkdir(parents=True)
    (bundle / "install.sh").write_text(INSTALL)
    for name in bundled:
        (bundle / "site" / name).symlink_to(Path(SITE_PACKAGES) / name)
    env = {**os.environ, "PYTHONPATH": str(hiding_site(tmp_path / "hide")), "HIDDEN_MODULES": hidden,
           "HIDDEN_FROM": SITE_PACKAGES, "GPUDEPS": str(bundle), "PYTHON": sys.executable,
           "SLOWDOWN": "8"}  # the parts' time limits on shared cores (imports alone: 40 s at load 26)
    return subprocess.run(["bash", "bench/gpu_session.sh", str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=1200, cwd=ROOT)


@pytest.mark.parametrize("bundled,named", [
    ((), "hydra"),  # no bundle of it: the first missing module is named
    (("hydra",), "mlxtend"),  # the bundle's hydra is found: the next one missing is named
])
def test_the_bundle_stays_on_the_path_and_a_missing_module_stops_the_script(tmp_path, bundled,
                                                                            named):
    """Before: the script set PYTHONPATH="$PWD" after sourcing the bundle (every sweep said
    `No module named 'hydra'`) and went on to exit 0.  Now the bundle's copy of hydra is found,
    and the first module neither has stops the script before any sweep: exit 1, one line."""
    done = _session(tmp_path, "hydra,mlxtend", bundled)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"gpu_session: the modules a sweep needs failed (exit 1): ModuleNotFoundError: No module "
        f"named '{named}'"], done.stderr
    assert not (tmp_path / "out" / "pytest.log").exists()  # nothing after it ran


@pytest.mark.slow  # ≈ 10 minutes on 2 shared cores: `make test-slow`
@pytest.mark.timeout(2400)
def test_the_gpu_session_runs_end_to_end_on_the_cpu(tmp_path):
    """Without a GPU every part runs at scale=smoke and the script exits 0, each report saying
    what it extrapolated from (the smoke grid's own models)."""
    env = {**os.environ, "SLOWDOWN": "8", "PYTHON": sys.executable}
    done = subprocess.run(["bash", "bench/gpu_session.sh", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=2300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = (tmp_path / "log").read_text()
    assert log.count("pools of 400 records: the grid's") == 2, log
    assert "gpu_session: every part done" in log
