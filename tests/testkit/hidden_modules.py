"""Python processes that lack an installed module, as on a machine without it: a
`sitecustomize` (on PYTHONPATH, so every process started with that environment imports it,
Ray's too) makes importing the modules named in HIDDEN_MODULES (comma-separated) raise what a
missing one raises.  HIDDEN_IN: only in processes whose script ends so (Ray's
`dashboard/dashboard.py`); HIDDEN_FROM: only the copies under that folder, so that another copy
on the path (a bundle's) is still found."""

from __future__ import annotations

from pathlib import Path

SITECUSTOMIZE = '''
import importlib.machinery, os, sys
_hidden = {name for name in os.environ.get("HIDDEN_MODULES", "").split(",") if name}
_only_in = os.environ.get("HIDDEN_IN", "")
_from = os.environ.get("HIDDEN_FROM", "")

class _Hidden:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] not in _hidden or path is not None:
            return None
        if _from:
            found = importlib.machinery.PathFinder.find_spec(
                name, [entry for entry in sys.path if not entry.startswith(_from)])
            if found is not None:
                return found
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

if _hidden and (sys.argv[0] or "").endswith(_only_in):
    sys.meta_path.insert(0, _Hidden)
'''


def hiding_site(folder: Path) -> Path:
    """`folder` with the hiding `sitecustomize.py` in it: put it on PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder
