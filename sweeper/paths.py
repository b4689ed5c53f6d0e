"""Names and folders that come from the user and become paths: checked before any work.

A sweep's name becomes `sweeps/<name>/` under the store, a config group option becomes
`conf/<group>/<option>.yaml`, an output folder is created and written: a name with `/` or `..`
would read or write outside the folder meant for it, and a folder that cannot be created is
found out only after minutes of training.  Each check returns the problem in words (None: fine),
so every command can name it in its one error message.  Standard library only: the light
commands (`sweeper.tracking.sync`, `sweeper.bounds`) use it without importing the sweep's stack.
"""

from __future__ import annotations

import errno
import os
import re
import uuid
from pathlib import Path
from typing import Optional

#: A name that becomes one folder or file name: no separator, no leading '.', no '..'.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def name_problem(field: str, value: object) -> Optional[str]:
    """Why `value` cannot be the single folder name `field` becomes, or None."""
    if isinstance(value, str) and NAME_PATTERN.match(value):
        return None
    return (f"{field}={value!r}: use 1 to 100 letters, digits, '_', '-', '.', starting with a letter "
            "or digit (it becomes a folder name: no '/', no leading '.' or '..')")


def option_problem(group: str, value: str) -> Optional[str]:
    """Why `value` cannot be an option of the config group `group` (a file name in the group's
    folder, without its extension), or None: a path would load a YAML from outside the folder."""
    if "/" in value or "\\" in value or ".." in value or value.startswith((".", "~")):
        return (f"{value!r} is a path, but {group} takes the name of an option of its config "
                "group (a file in the group's folder), nothing outside it")
    return None


#: Characters no path or MLflow name may hold: NUL and the other C0 controls, and DEL.  The OS
#: refuses NUL outright, and MLflow retries a request that carries one without end.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def control_problem(field: str, value: str) -> Optional[str]:
    """Why `value` cannot be carried by the OS or MLflow (a control character), or None."""
    found = CONTROL_CHARACTERS.search(value)
    if found is None:
        return None
    return (f"{field}={value!r}: holds the control character {found.group()!r} at position "
            f"{found.start()}, which no path or MLflow name can carry; remove it")


def folder_problem(field: str, given: str, path: os.PathLike | str) -> Optional[str]:
    """Why the folder `path` cannot be written (or created with its parents), or None.

    Asks the file system rather than the permission bits: a probe folder is created in `path`
    (or in its nearest existing ancestor) and removed at once, so `/proc`, a read-only mount
    or a file in the way are all found, for root too.  A control character, a name too long for
    the file system and a symlink loop are named too.  Nothing is left behind either way.
    """
    text = os.fspath(path)
    problem = control_problem(field, text)
    if problem:
        return problem
    given = shortened(given)
    try:
        return _folder_problem(field, given, Path(os.path.abspath(os.path.expanduser(text))))
    except RuntimeError:  # pathlib's "Symlink loop from …"
        return f"{field}={given!r}: a symbolic link loop on the way (ELOOP); give a real folder"
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return (f"{field}={given!r}: too long for the file system ({len(text)} characters; "
                    f"at most {_limit('PC_PATH_MAX', 4096)} in all and "
                    f"{_limit('PC_NAME_MAX', 255)} bytes per folder name); give a shorter path")
        if error.errno == errno.ELOOP:
            return f"{field}={given!r}: a symbolic link loop on the way (ELOOP); give a real folder"
        return f"{field}={given!r}: cannot be used ({error.strerror or error})"


def shortened(value: str, keep: int = 120) -> str:
    """`value` as an error message shows it: a path of thousands of characters is cut in the
    middle (its start and end say which it was), with its length."""
    if len(value) <= keep:
        return value
    return f"{value[:keep - 40]}…{value[-20:]} ({len(value)} characters)"


def _limit(name: str, default: int) -> int:
    try:
        return int(os.pathconf("/", name))
    except (OSError, ValueError):
        return default


def _folder_problem(field: str, given: str, target: Path) -> Optional[str]:
    target.resolve()  # a symlink loop raises here (RuntimeError), a name too long (OSError)
    ancestor = target
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if target.exists() and not target.is_dir():
        return f"{field}={given!r}: {target} is a file; give a folder"
    if not ancestor.is_dir():
        if ancestor.is_symlink():  # exists() is False for a link into a loop or nowhere
            return f"{field}={given!r}: {ancestor} is a symbolic link that leads nowhere"
        return f"{field}={given!r}: cannot be created, {ancestor} is a file, not a folder"
    probe = ancestor / f".sweeper-write-check-{uuid.uuid4().hex}"
    try:
        probe.mkdir()
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise
        reason = error.strerror or str(error)
        if ancestor == target:
            return f"{field}={given!r}: the folder {target} is not writable ({reason})"
        return f"{field}={given!r}: cannot be created, {ancestor} is not writable ({reason})"
    probe.rmdir()
    return None


def file_problem(field: str, given: str) -> Optional[str]:
    """Why the file `given` (an output of a command) could not be written, or None: its folder
    cannot be written or created, or it is a folder.  Checked before the work that produces it."""
    path = Path(os.path.abspath(os.path.expanduser(given))) if given else None
    if path is None or given.endswith(os.sep):
        return f"{field}={given!r}: give a file's path"
    problem = folder_problem(field, given, path.parent)
    if problem:
        return problem
    if path.is_dir():
        return f"{field}={given!r}: is a folder; give a file's path"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{field}={given!r}: the file is not writable"
    return None
