"""Where a command may write: never onto, into or around one of its inputs.

Every command that writes calls ``check_output`` with everything it reads, before it writes
anything (and before long work, so that a replay of an hour does not end in "permission
denied").  An output is refused when it

- is an input: the same path, a symbolic link to it, or a hard link (the same file under another
  name), as ``replay ingest a.log --out a.log`` would be;
- contains an input: a directory holding the trace being replayed, which ``--force`` would delete;
- lies inside an input: a query's ``--out`` inside a run directory it reads;
- is a directory where a file is written, or something other than a regular file or directory
  (a device such as ``/dev/stdout``, a pipe), which renaming a file onto would replace;
- cannot be written: its folder is not a directory, or is not writable.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from replay.errors import ReplayError

STDIN = "-"


def check_output(out: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (), *,
                 directory: bool = False) -> None:
    """Refuse ``out`` (a file, or a directory if ``directory``) if writing it could touch one of
    ``inputs`` (paths; ``-`` and None are skipped) or cannot succeed; see the module docstring."""
    out = Path(out)
    for given in inputs:
        if given is None or str(given) == STDIN:
            continue
        problem = _overlap(out, Path(given))
        if problem:
            raise ReplayError(f"{out}: {problem}; choose another output")
    _check_kind(out, directory)
    _check_writable(out.parent)


def _overlap(out: Path, given: Path) -> str | None:
    """How writing ``out`` would touch the input ``given``, or None."""
    out_real, given_real = Path(os.path.realpath(out)), Path(os.path.realpath(given))
    if out_real == given_real or _same_file(out, given):
        same_name = os.path.abspath(out) == os.path.abspath(given)
        return f"is the input {given}" + ("" if same_name else " (a link to it)")
    if given_real.is_relative_to(out_real):
        return f"holds the input {given}"
    if out_real.is_relative_to(given_real):
        return f"lies inside the input {given}"
    if out.is_dir() and given.is_file():
        for entry in _children(out):
            if _same_file(entry, given):
                return f"holds the input {given} (as {entry.name})"
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _children(folder: Path, limit: int = 10_000) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for _, e in zip(range(limit), entries)]
    except OSError:
        return []


def _check_kind(out: Path, directory: bool) -> None:
    try:
        mode = os.stat(out).st_mode
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(out.parent)) from None
    if directory:
        if not stat.S_ISDIR(mode):
            raise ReplayError(f"{out}: exists and is not a directory; choose another output")
    elif stat.S_ISDIR(mode):
        raise ReplayError(f"{out}: is a directory; give the name of a file to write")
    elif not stat.S_ISREG(mode):
        raise ReplayError(f"{out}: is not a regular file (a device or a pipe); replay writes "
                          f"files only")


def _check_writable(folder: Path) -> None:
    """The nearest existing folder of ``folder`` (which the write creates if missing) is a
    directory this process may create files in."""
    folder = Path(os.path.abspath(folder))
    while not folder.exists() and folder != folder.parent:
        if folder.is_symlink():
            break  # a dangling link: the write reports it
        folder = folder.parent
    if folder.exists() and not folder.is_dir():
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        cause = errno.EROFS if _read_only_mount(folder) else errno.EACCES
        raise OSError(cause, os.strerror(cause), str(folder))


def _read_only_mount(folder: Path) -> bool:
    """Whether ``folder`` is on a file system mounted read-only (``os.access`` says only "no",
    which is "Read-only file system" there, not "Permission denied")."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False
