"""Names and folders that come from the user and become paths: checked before any work.

A sweep's name becomes `sweeps/<name>/` under the store, a config group option becomes
`conf/<group>/<option>.yaml`, an output folder is created and written: a name with `/` or `..`
would read or write outside the folder meant for it, and a folder that cannot be created is
found out only after minutes of training.  Each check returns the problem in words (None: fine),
so every command can name it in its one error message.  Standard library only: the light
commands (`sweeper.sync`, `sweeper.bounds`) use it without importing the sweep's stack.
"""

from __future__ import annotations

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


def folder_problem(field: str, given: str, path: os.PathLike | str) -> Optional[str]:
    """Why the folder `path` cannot be written (or created with its parents), or None.

    Asks the file system rather than the permission bits: a probe folder is created in `path`
    (or in its nearest existing ancestor) and removed at once, so `/proc`, a read-only mount
    or a file in the way are all found, for root too.  Nothing is left behind either way.
    """
    target = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    ancestor = target
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if target.exists() and not target.is_dir():
        return f"{field}={given!r}: {target} is a file; give a folder"
    if not ancestor.is_dir():
        return f"{field}={given!r}: cannot be created, {ancestor} is a file, not a folder"
    probe = ancestor / f".sweeper-write-check-{uuid.uuid4().hex}"
    try:
        probe.mkdir()
    except OSError as error:
        reason = error.strerror or str(error)
        if ancestor == target:
            return f"{field}={given!r}: the folder {target} is not writable ({reason})"
        return f"{field}={given!r}: cannot be created, {ancestor} is not writable ({reason})"
    probe.rmdir()
    return None
