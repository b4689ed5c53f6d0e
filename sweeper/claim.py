"""A sweep's name is claimed: one process at a time holds it, and it names one computation.

Two sweeps of one name on one store would both train every model and log every cell twice; a
second run with other grid values under a name that already holds results would silently
replace them.  So before a sweep reads what is left to do:

* **lock** (`held`): `sweeps/<name>/.lock` is taken with `flock` (local stores).  A second
  process is refused at once, naming the holder (host, pid, since), or waits with `--wait`
  (`store.wait=true`).  The kernel releases the lock when its holder dies however it dies, so a
  lock left behind by a killed sweep is taken over, and said (the file is still there with its
  holder line: a clean exit removes it).  Object stores (S3, GCS) are not locked: pyarrow's file systems
  offer no atomic create-if-absent, so a lease there could be taken twice; see docs/cluster.md.
* **identity** (`require_same_sweep`): the sweep's `sweep.json` holds the content keys of its
  cells (each a hash of every setting its result depends on).  A run that would drop any of them
  (another grid, or a setting that keys every cell anew) is refused (exit 2), naming the settings
  that differ and the two ways on: another `name=`, or `--replace` (`store.replace=true`) to
  replace the name's results on purpose.  A run that keeps every cell and adds some (an attack,
  a p) grows the sweep: nothing is lost.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import logging
import os
import socket
import stat
from pathlib import Path
from typing import Any, Iterator, Optional

from sweeper import interrupts
from sweeper.config import ConfigError
from sweeper.credentials import MASK
from sweeper.store.files import DiskFull, LinkInStore, inside
from sweeper.store.artifacts import ArtifactStore, ManifestError

logger = logging.getLogger(__name__)

LOCK_NAME = ".lock"
#: Config sections that change how a sweep runs or where it is logged, never what it computes.
OPERATIONAL = ("cluster", "resources", "tracking", "store")


class SweepRefused(ConfigError):
    """A sweep refused before it starts (exit 2), in its own words rather than "invalid
    configuration"."""

    def __str__(self) -> str:
        return "\n".join(self.problems)


def holder_line() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}


def _describe(holder: dict[str, Any]) -> str:
    return (f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, "
            f"since {holder.get('since', '?')}")


def _read_holder(handle) -> Optional[dict[str, Any]]:
    handle.seek(0)
    text = handle.read().decode(errors="replace")
    try:
        holder = json.loads(text) if text.strip() else None
    except ValueError:
        return {"host": "?", "pid": "?", "since": "?"}
    return holder if isinstance(holder, dict) else None


@contextlib.contextmanager
def held(store: ArtifactStore, name: str, wait: bool = False) -> Iterator[None]:
    """Hold sweep `name`'s lock for the block.  Refused (`SweepRefused`) when another process holds
    it, unless `wait`; a no-op on an object store (see the module docstring).

    The store's root is marked as one (`ArtifactStore.mark`).  The lock file is removed on
    release (with the folders made for it and a marker made now, so a refused sweep leaves
    nothing behind); a symbolic link on its way is refused (`sweeper.store.files.inside`); a taker
    checks that the file it locked is still the one at the path, since a holder may have
    removed it meanwhile."""
    if store.local_root is None:
        logger.debug("sweep '%s' is not locked: object stores have no atomic lock", name)
        yield
        return
    try:  # the lock file itself is `_open_lock`'s to check, as it opens it
        path = inside(store.local_root, f"sweeps/{name}") / LOCK_NAME
    except LinkInStore as link:
        raise SweepRefused([f"sweep {name!r}: {link}"]) from None
    root = store.local_root
    made = [folder for folder in (path.parent, path.parent.parent) if not folder.exists()]
    made_root = not root.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    marked = False

    def release() -> None:  # the lock itself goes with the file's handle, or the process
        path.unlink(missing_ok=True)
        for folder in made:  # deepest first; kept when anything else is in it
            with contextlib.suppress(OSError):
                folder.rmdir()
        if marked:
            store.unmark()  # a sweep that left nothing in the store leaves no marker either
        if made_root:
            with contextlib.suppress(OSError):
                root.rmdir()

    handle = _locked(path, name, store.uri, wait)
    try:
        with interrupts.undone_on_abort(release):
            left = _read_holder(handle)
            if left:
                logger.warning("sweep '%s': took over the lock left by %s (that process is gone)",
                               name, _describe(left))
            _write(handle, json.dumps(holder_line()), path)
            marked = store.mark()  # a store from now on (`sweeper.store.artifacts.store_root_problem`)
            yield
    finally:
        release()
        handle.close()


def _locked(path: Path, name: str, where: str, wait: bool):
    """The lock file at `path`, open and locked by this process."""
    while True:
        handle = open(_open_lock(path, name), "r+b", buffering=0)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as busy:
            if busy.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                handle.close()
                raise
            holder = _read_holder(handle) or {}
            if not wait:
                handle.close()
                raise SweepRefused([
                    f"sweep {name!r} is running in another process ({_describe(holder)}) on the "
                    f"store {where}: rerun with --wait to wait for it, or name this run "
                    "differently (name=...)"]) from None
            logger.info("sweep '%s' is held by %s: waiting for it (--wait)", name,
                        _describe(holder))
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(handle.fileno()).st_ino:
            return handle
        handle.close()  # the holder removed it as we waited: lock the file now at the path


def _open_lock(path: Path, name: str) -> int:
    """The lock file's descriptor, created if absent; never through a symbolic link and never
    anything but a regular file (`SweepRefused` otherwise): what a link points at would be written
    over with the holder's line, any file the sweep's user can write."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EACCES):
            raise
        what = ("a symbolic link" if path.is_symlink() else "a folder" if path.is_dir()
                else "not a regular file" if path.exists() else "not writable")
        raise SweepRefused([f"sweep {name!r}: its lock file {path} is {what}, not the lock this "
                       "program makes: something else put it there. Remove it once you know "
                       "what it is, or name this run differently (name=...)"]) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device opened for writing
        os.close(fd)
        raise SweepRefused([f"sweep {name!r}: its lock file {path} is not a regular file, not the "
                       "lock this program makes: something else put it there. Remove it once "
                       "you know what it is, or name this run differently (name=...)"])
    return fd


def _write(handle, text: str, path: Path) -> None:
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(text.encode())
        os.fsync(handle.fileno())
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise DiskFull(path) from None
        raise


def require_same_sweep(store: ArtifactStore, name: str, cells: list[str], config: dict[str, Any],
                       replace: bool) -> list[str]:
    """Refuse (`SweepRefused`) a run that would drop cells `sweeps/<name>/sweep.json` holds (another
    grid, or settings that key every cell anew), unless `replace`; then say what is replaced.
    A run that holds every cell of the last one and more (an attack, a p added) grows the sweep.

    Returns the plan keys the sweep had before it grew, oldest first ([] for a new or a replaced
    sweep): its MLflow run, found by one of them, is the grown sweep's too."""
    try:
        manifest = store.read_manifest(name)
    except (FileNotFoundError, ManifestError):  # a new name, or a manifest the run rewrites
        return []
    held_cells, now = set(manifest["cells"]), set(cells)
    if held_cells <= now:
        earlier = list(manifest.get("earlier_keys", []))
        if held_cells != now:
            logger.info("sweep '%s' grows from %d to %d cells", name, len(held_cells), len(now))
            earlier.append(manifest["sweep_key"])
        return earlier
    changed = differences(manifest.get("config"), config)
    what = (f"settings that differ: {'; '.join(changed[:6])}" + (" …" if len(changed) > 6 else "")
            if changed else "the same settings, but cells keyed differently (sweeper's artifact "
            "version or a setting's meaning changed)")
    dropped = len(held_cells - now)
    if replace:
        logger.warning("sweep '%s': replacing its results, %d of its %d cells dropped (%s), as "
                       "--replace asks", name, dropped, len(held_cells), what)
        return []
    raise SweepRefused([
        f"sweep {name!r} in {store.uri} already holds the results of another grid or settings "
        f"({what}; {dropped} of its {len(held_cells)} cells are not in this run): give this run "
        "its own name (name=NEW_NAME), or replace the old results on purpose with --replace "
        "(store.replace=true)"])


def differences(before: Any, now: dict[str, Any]) -> list[str]:
    """`key: old → new` for each result-bearing setting that differs (operational sections and
    masked values left out); [] when the old config is unknown."""
    if not isinstance(before, dict):
        return []
    old, new = _flat(before), _flat(now)
    found = []
    for key in sorted(old.keys() | new.keys()):
        if key.split(".", 1)[0] in OPERATIONAL or key == "name":
            continue
        a, b = old.get(key, "(none)"), new.get(key, "(none)")
        if a != b and MASK not in (str(a), str(b)):
            found.append(f"{key}: {a} → {b}")
    return found


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(_flat(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: json.dumps(node, default=str)}
