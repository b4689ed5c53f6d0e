"""Files a loader needs: where they go in `data_dir`, where they come from, how they are checked.

A file is used only once verified: by its MD5 where a checksum is pinned, otherwise (no checksum
is published for it anywhere we could find) by the loader's own format and shape checks.  A file
may also already be on the machine elsewhere — a Debian package, a Python package's data — as a
`LocalCopy` with checksums of its own; it is used when every file of the set verifies there.
Downloads are pooch's (retried, checked against the pinned MD5, never left half-written); this
module adds the local copies and the one message: when nothing works, `DatasetUnavailable`
names the dataset, the data_dir looked in, and each file to place there with its URL and
checksum.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from jobs.datasets.core import DatasetUnavailable

#: What the message says of a file whose checksum is not pinned.
NOT_PINNED = "not pinned (none is published): the loader checks the file's format and shape instead"


@dataclass(frozen=True)
class RemoteFile:
    """A file a loader needs: its name in its folder of `data_dir`, its URL, its MD5 (None: not
    pinned, because no checksum is published for it)."""

    filename: str
    url: str
    md5: str | None


@dataclass(frozen=True)
class LocalCopy:
    """The same files installed elsewhere on this machine, with the checksums of that copy."""

    description: str  # e.g. "Debian's dataset-fashion-mnist package"
    directory: Path | None  # None: not installed
    md5: Mapping[str, str | None] = field(default_factory=dict)  # filename -> MD5 of the copy there


#: Retries of a failed download (pooch's `retry_if_failed`, with its back-off): 3 tries in all.
DOWNLOAD_RETRIES = 2


def md5sum(path: Path) -> str:
    import pooch

    return pooch.file_hash(str(path), alg="md5")


def problem_with(path: Path, md5: str | None) -> str | None:
    """None when `path` is usable, else what is wrong with it."""
    if not path.is_file():
        return "is missing"
    if md5 is not None and md5sum(path) != md5:
        return "has the wrong checksum"
    return None


def fetch_all(dataset: str, data_dir: Path, folder: str, files: Sequence[RemoteFile], download: bool,
              copies: Sequence[LocalCopy] = ()) -> list[Path]:
    """The verified paths of `files`: from `data_dir/folder`, else a verified local copy, else
    downloaded there (when `download`); else `DatasetUnavailable` listing each file to place."""
    directory = data_dir / folder
    paths = [directory / remote.filename for remote in files]
    problems = {remote: problem_with(path, remote.md5) for remote, path in zip(files, paths)}
    if not any(problems.values()):
        return paths
    for copy in copies:
        if copy.directory is not None and all(
                problem_with(copy.directory / remote.filename, copy.md5[remote.filename]) is None
                for remote in files):
            return [copy.directory / remote.filename for remote in files]
    for remote, problem in problems.items():
        if problem is not None:
            problems[remote] = (_download(remote, directory, problem) if download
                                else problem + " and dataset.download is false")
    if not any(problems.values()):
        return paths
    raise DatasetUnavailable(unavailable_message(dataset, data_dir, directory, problems, copies))


def _download(remote: RemoteFile, directory: Path, problem: str) -> str | None:
    """Download `remote` into `directory` with pooch; None on success, else the problem grown by
    why not.  Pooch downloads into a scratch folder first, so a refused download leaves no
    folder behind in `data_dir`; its own log lines are kept off the task's output."""
    import pooch
    import requests

    logging.getLogger("pooch").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="sweeper-download-") as scratch:
        fetcher = pooch.create(path=scratch, base_url="", retry_if_failed=DOWNLOAD_RETRIES,
                               registry={remote.filename: f"md5:{remote.md5}" if remote.md5 else None},
                               urls={remote.filename: remote.url})
        try:
            fetched = fetcher.fetch(remote.filename,
                                    downloader=pooch.HTTPDownloader(timeout=30, progressbar=False))
        except (OSError, requests.RequestException) as error:  # a bad URL is a ValueError too
            return problem + f" and the download from {remote.url} failed ({error})"
        except ValueError:  # pooch's hash check
            return problem + f" and the file downloaded from {remote.url} has the wrong checksum"
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / (remote.filename + ".part")  # on data_dir's disk, then renamed
        shutil.move(fetched, partial)
        os.replace(partial, directory / remote.filename)
    return None


def unavailable_message(dataset: str, data_dir: Path, directory: Path,
                        problems: Mapping[RemoteFile, str | None],
                        copies: Sequence[LocalCopy] = ()) -> str:
    wrong = [(remote, problem) for remote, problem in problems.items() if problem]
    lines = [f"Dataset '{dataset}' is not available (data_dir = {data_dir}):"]
    lines += [f"  {directory / remote.filename} {problem}." for remote, problem in wrong]
    lines.append("Place " + ("this file" if len(wrong) == 1 else "these files") + " there:")
    for remote, _ in wrong:
        lines += [f"  {directory / remote.filename}", f"    from {remote.url}",
                  f"    md5  {remote.md5 or NOT_PINNED}"]
    for copy in copies:
        where = (f"looked in {copy.directory}" if copy.directory is not None
                 else "it is not installed")
        lines.append(f"Or install {copy.description}: its verified copy is used ({where}).")
    return "\n".join(lines)
