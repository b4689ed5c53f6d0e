"""Where the store's bytes live, and how they get there whole: a local folder or an object
store (pyarrow's filesystems), atomic writes, checksums, per-epoch checkpoints, the noise cache,
quarantine for weights that do not load safely, and a full disk said as such.

`sweeper.store.artifacts.ArtifactStore` lays artifacts out on top of these; nothing here knows what a
model or a cell is.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import io
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sweeper.errors import error_chain


class CorruptArtifact(ValueError):
    """A stored file whose bytes do not match the checksum written with them."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: Mode of the files people read (the results datasets): they hold no secrets.
PUBLIC_MODE = 0o644


class DiskFull(OSError):
    """ENOSPC, with the path it was met at: "disk full at <path>"."""

    def __init__(self, path: os.PathLike | str) -> None:
        super().__init__(errno.ENOSPC, "disk full", str(path))

    def __str__(self) -> str:
        return f"disk full at {self.filename}"

    def __reduce__(self):  # raised in a Ray task, it reaches the driver whole: "disk full at …"
        return type(self), (self.filename,)


def disk_full(error: BaseException) -> Optional[str]:
    """Where the disk was found full, from a disk-full error anywhere in `error`'s chain: its
    path, or (an error that names none: SQLite's "database or disk is full", a library's bare
    ENOSPC) what the error says; None when the disk is not what failed."""
    unnamed = None
    for link in error_chain(error):
        if isinstance(link, OSError) and link.errno == errno.ENOSPC and link.filename:
            return str(link.filename)
        said = str(link).strip().splitlines()
        if unnamed is None and said and ((isinstance(link, OSError) and link.errno == errno.ENOSPC)
                                         or "disk is full" in said[0] or "No space left" in said[0]):
            unnamed = said[0]
    return None if unnamed is None else f"an unnamed file ({unnamed})"


def atomic_write_bytes(path: Path, data: bytes, mode: Optional[int] = None) -> None:
    """Write `data` to `path` whole or not at all; `mode` (default: mkstemp's 0600) is set before
    the rename, so the file never appears with another.  A failed write leaves no partial file;
    a full disk raises `DiskFull` naming `path`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PART)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise DiskFull(path) from None
        raise
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            raise DiskFull(path) from None
        raise


#: The suffix of a file being written (`atomic_write_bytes`), renamed into place once whole.
PART = ".part"
#: A partial file older than this was left by a process killed mid-write: swept up.
STALE_PART_SECONDS = 600.0


def sweep_stale_parts(root: Path, older_than: float = STALE_PART_SECONDS) -> int:
    """Delete the partial files (`.<name>.<random>.part`) under `root` older than `older_than`
    seconds (another process may be writing a younger one); how many went."""
    removed, now = 0, time.time()
    for folder, _, names in os.walk(root):
        for name in names:
            if name.startswith(".") and name.endswith(PART):
                path = Path(folder) / name
                with contextlib.suppress(OSError):
                    if now - path.stat().st_mtime > older_than:
                        path.unlink()
                        removed += 1
    return removed


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def read_parquet(data: bytes, rel: str) -> pa.Table:
    """A Parquet file's table; bytes that passed their checksum but are no Parquet are corrupt."""
    try:
        return pq.ParquetFile(pa.BufferReader(data)).read()
    except pa.ArrowInvalid as error:
        raise CorruptArtifact(f"{rel} is not a Parquet file ({error})") from None


def is_uri(root: str) -> bool:
    """A URI with a scheme (s3://…, file://…), as opposed to a local path (`C:/…`, `a:b`)."""
    return "://" in str(root) and len(urlparse(str(root)).scheme) > 1


class LinkInStore(OSError):
    """A symbolic link where a local store writes (`inside`): what it points at would be written
    over or filled, any folder or file the sweep's user can write."""

    def __init__(self, link: os.PathLike | str) -> None:
        super().__init__(errno.ELOOP, "a symbolic link inside the store", str(link))

    def __str__(self) -> str:
        return (f"{self.filename} is a symbolic link inside the store, which writes only into "
                "its own folders, never through a link: something else put it there. Remove it "
                "once you know what it is (move what it points at into the store, if that is "
                "what was meant)")

    def __reduce__(self):  # raised in a Ray task, it reaches the driver whole
        return type(self), (self.filename,)


def link_met(error: BaseException) -> Optional[LinkInStore]:
    """The symbolic link a local store refused to write through (`LinkInStore`) anywhere in
    `error`'s chain, or None: never retried (the link stays where it is), it stops the sweep."""
    for link in error_chain(error):
        if isinstance(link, LinkInStore):
            return link
    return None


def inside(root: Path, rel: str) -> Path:
    """`root / rel`, where a local store writes, once none of `rel`'s components (the folders on
    the way, the file itself) is a symbolic link: `LinkInStore` otherwise.  Every path a local
    store writes or deletes goes through here (`LocalFiles`, the sweep's lock, its figures);
    `root` itself is the resolved `store.root`, which may be reached through links.  Components
    not there yet are created by the writer as plain folders."""
    path = root
    for part in Path(rel).parts:
        path = path / part
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                raise LinkInStore(path)
        except (FileNotFoundError, NotADirectoryError):  # the rest is not there either
            break
    return root / rel


class LocalFiles:
    """Files under a local folder, written atomically (temporary name, fsync, rename), never
    through a symbolic link (`inside`)."""

    def __init__(self, root: Path):
        self.root = root

    def read(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def write(self, rel: str, data: bytes, public: bool = False) -> None:
        """`public`: a file people read (mode 0644); others keep mkstemp's 0600."""
        atomic_write_bytes(inside(self.root, rel), data, PUBLIC_MODE if public else None)

    def delete(self, rel: str) -> None:
        inside(self.root, rel).unlink(missing_ok=True)

    def names(self, rel_dir: str) -> list[str]:
        folder = self.root / rel_dir
        return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []

    def folders(self, rel_dir: str) -> list[str]:
        folder = self.root / rel_dir
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


class ObjectFiles:
    """Objects under a prefix of a pyarrow filesystem (S3, GCS); one PUT per file is atomic."""

    def __init__(self, uri: str):
        self.fs, self.base = pafs.FileSystem.from_uri(uri)
        self.base = self.base.rstrip("/")

    def _path(self, rel: str) -> str:
        return f"{self.base}/{rel}"

    def read(self, rel: str) -> bytes:
        try:
            with self.fs.open_input_stream(self._path(rel)) as stream:
                return stream.readall()
        except OSError as error:
            if not self.exists(rel):
                raise FileNotFoundError(self._path(rel)) from error
            raise

    def write(self, rel: str, data: bytes, public: bool = False) -> None:
        """`public` is for local files: an object's access is the bucket's policy."""
        with self.fs.open_output_stream(self._path(rel)) as stream:
            stream.write(data)

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self._path(rel)).type == pafs.FileType.File

    def delete(self, rel: str) -> None:
        if self.exists(rel):
            self.fs.delete_file(self._path(rel))

    def require_bucket(self) -> None:
        """OSError, in one line, when the bucket itself is not there: a wrong store.root or
        endpoint, not a sweep that has not run yet."""
        bucket = self.base.split("/", 1)[0]
        if self.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise OSError(f"bucket {bucket!r} does not exist (or these credentials cannot see it): "
                          "check store.root and its endpoint")

    def names(self, rel_dir: str) -> list[str]:
        selector = pafs.FileSelector(self._path(rel_dir), allow_not_found=True)
        return sorted(info.base_name for info in self.fs.get_file_info(selector)
                      if info.type == pafs.FileType.File)

    def folders(self, rel_dir: str) -> list[str]:
        selector = pafs.FileSelector(self._path(rel_dir), allow_not_found=True)
        return sorted(info.base_name for info in self.fs.get_file_info(selector)
                      if info.type == pafs.FileType.Directory)


class StoredCheckpoint:
    """A model's per-epoch training state: one file whose first line is the rest's checksum."""

    def __init__(self, files, rel: str):
        self._files, self._rel = files, rel

    def load(self) -> Optional[bytes]:
        """The last state saved, or None when there is none (or it is damaged: start over)."""
        try:
            data = self._files.read(self._rel)
        except FileNotFoundError:
            return None
        digest, _, payload = data.partition(b"\n")
        return payload if digest.decode(errors="replace") == sha256_hex(payload) else None

    def save(self, payload: bytes) -> None:
        self._files.write(self._rel, sha256_hex(payload).encode() + b"\n" + payload)

    def delete(self) -> None:
        self._files.delete(self._rel)

    def quarantine(self) -> str:
        """Move the state aside (`quarantine/…`): it passed its checksum but failed to load."""
        return quarantine(self._files, [self._rel])


def quarantine(files, rels: list[str]) -> str:
    """Move the files `rels` under `quarantine/<stamp>/` (kept to be looked at, never read again:
    what failed to load safely, malicious or incompatible); that folder.  The first of `rels` is
    deleted first, so a reader sees it absent at once."""
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S%f")
    for rel in rels:
        with contextlib.suppress(FileNotFoundError):
            files.write(f"quarantine/{stamp}/{rel}", files.read(rel))
    for rel in rels:
        files.delete(rel)
    return f"quarantine/{stamp}/"


class StoredNoiseCache:
    """Calibrated noise multipliers, shared by every training task of a store
    (`jobs.engine.accounting.NoiseCache`): a sweep searches each (ε, δ, q, steps, accountant) once."""

    def __init__(self, files):
        self._files = files

    def _entry(self, key: str) -> StoredCheckpoint:
        return StoredCheckpoint(self._files, f"calibration/{sha256_hex(key.encode())}.json")

    def get(self, key: str) -> Optional[float]:
        payload = self._entry(key).load()
        if payload is None:
            return None
        entry = json.loads(payload)
        return float(entry["noise_multiplier"]) if entry.get("key") == key else None

    def put(self, key: str, value: float) -> None:
        self._entry(key).save(json.dumps({"key": key, "noise_multiplier": value}).encode())
