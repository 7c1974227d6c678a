"""Write files and directories so that a reader never sees a partial result.

Everything is written under a temporary name next to the destination, flushed to disk (``fsync``
of the file, or of every file of a directory, and of the directory itself) and only then renamed
into place, and the folder is flushed so that the rename survives a crash.  On any error, or an
interrupt, the temporary is removed and the destination is left untouched.

A temporary's name says whose it is: ``.NAME.HOST-PID.RANDOM.replay-tmp``.  A process killed with
``kill -9`` cannot remove its temporaries; the next command that writes into the same folder
removes every one whose process (on this host) is gone (``sweep``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import secrets
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

from replay import interrupts
from replay.errors import ReplayError

TEMPORARY_SUFFIX = ".replay-tmp"
_HOST = hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()


def temporary_name(name: str) -> str:
    """A fresh temporary name for ``name``, recognisable by ``sweep``."""
    return f".{name}.{_HOST}-{os.getpid()}.{secrets.token_hex(4)}{TEMPORARY_SUFFIX}"


def sweep(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporaries in ``folder`` left by processes of this host that no longer run
    (and by nobody else: another host's, or a live process's, are left alone); returns them."""
    removed: list[Path] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not name.endswith(TEMPORARY_SUFFIX) or _owner_alive(name):
            continue
        path = Path(folder) / name
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            continue  # another process swept it first
        except OSError:
            continue  # not ours to force; it stays
        removed.append(path)
    return removed


def _owner_alive(name: str) -> bool:
    """Whether the process that made temporary ``name`` may still be using it."""
    parts = name[:-len(TEMPORARY_SUFFIX)].rsplit(".", 2)
    host, _, pid = parts[-2].partition("-") if len(parts) == 3 else ("", "", "")
    if host != _HOST or not pid.isdigit():
        return True
    if int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, as another user
    return True


@contextlib.contextmanager
def atomic_file(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in ``dest``'s folder; rename it to ``dest`` if the block succeeds."""
    dest = Path(dest)
    make_folder(dest.parent)
    sweep(dest.parent)
    tmp = _temporary_for(dest)
    with _temporary(tmp, _new_file):
        try:
            yield tmp
            interrupts.checkpoint()  # a Ctrl-C that a library swallowed stops it still
            fsync(tmp)
            os.replace(tmp, dest)
            fsync(dest.parent)
        except OSError as err:
            raise _naming(err, tmp, dest) from None


@contextlib.contextmanager
def atomic_dir(dest: str | os.PathLike, *, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary directory; rename it to ``dest`` if the block succeeds.

    With ``replace`` an existing ``dest`` is swapped for the new directory in one step where the
    system can (Linux's ``renameat2``), else renamed away just before; it is removed after.
    Without, a ``dest`` that another process wrote meanwhile is an error, and stays as it is.
    """
    dest = Path(dest)
    make_folder(dest.parent)
    sweep(dest.parent)
    tmp = _temporary_for(dest)
    with _temporary(tmp, lambda path: os.mkdir(path, 0o777)):
        try:
            yield tmp
            interrupts.checkpoint()
            fsync_tree(tmp)
            if replace and dest.exists():
                _replace_dir(tmp, dest)
            else:
                try:
                    os.rename(tmp, dest)
                except OSError as err:
                    if err.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                        raise ReplayError(f"{dest}: another process wrote it meanwhile; this "
                                          f"result was not kept") from None
                    raise
            fsync(dest.parent)
        except OSError as err:
            raise _naming(err, tmp, dest) from None


def _temporary_for(dest: Path) -> Path:
    """The temporary that ``dest`` is written as; a name that the temporary's parts make too
    long for the file system is refused in terms of ``dest`` (the system's error would name
    the folder, or the temporary)."""
    try:
        limit = os.pathconf(dest.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255  # Linux's and macOS's file systems
    name = len(os.fsencode(dest.name))
    # the temporary's parts, with the longest process id Linux gives (7 digits), so that whether
    # a name fits does not depend on the process's
    extra = len(temporary_name("")) - len(str(os.getpid())) + 7
    if name + extra > limit:
        raise ReplayError(f"{dest}: a name of {name} bytes; replay writes it first under a "
                          f"temporary name up to {extra} bytes longer, and this file system "
                          f"allows {limit}: choose a name of at most {limit - extra}")
    return dest.parent / temporary_name(dest.name)


@contextlib.contextmanager
def temporary_dir(folder: str | os.PathLike, label: str) -> Iterator[Path]:
    """A scratch directory in the existing ``folder`` (spill files, partial results), removed
    on exit; one a killed process left is removed by the next ``sweep`` of ``folder``."""
    folder = Path(folder)
    sweep(folder)
    path = folder / temporary_name(label)
    with _temporary(path, lambda path: os.mkdir(path, 0o700)):
        yield path


@contextlib.contextmanager
def _temporary(path: Path, make: Callable[[Path], object]) -> Iterator[None]:
    """Make the temporary ``path`` with ``make`` and remove it when the block ends, if it is
    still there (an atomic write renames it into place first).

    It is made inside the ``try``: a Ctrl-C that lands as ``make`` returns (Python raises it
    there, before any next statement) must not leave it behind.  A CI run saw this once in
    ``replay run``'s run directory.  An error of ``make`` names the folder."""
    ours = True
    try:
        try:
            make(path)
        except OSError as err:
            ours = False  # not made (or another's): not ours to remove
            raise OSError(err.errno, err.strerror, str(path.parent)) from None
        yield
    finally:
        if ours:
            _remove(path)


def _new_file(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


def fsync(path: str | os.PathLike) -> None:
    """Flush a file's or a directory's contents to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """``fsync`` every file and directory under ``root``, the directories after their files."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync(os.path.join(folder, name))
        fsync(folder)


def _replace_dir(new: Path, dest: Path) -> None:
    if _exchange(new, dest):  # new now holds the old directory
        shutil.rmtree(new, ignore_errors=True)
        return
    old = dest.parent / temporary_name(dest.name)
    os.replace(dest, old)
    os.replace(new, dest)
    shutil.rmtree(old, ignore_errors=True)


RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    done = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EPERM):  # not supported by the file system
        return False
    raise OSError(code, os.strerror(code), str(b))


def make_folder(folder: Path) -> None:
    """Create ``folder`` and its parents if missing; a file in the way is an error naming it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder)) from None


def _naming(err: OSError, tmp: Path, dest: Path) -> OSError:
    """``err``, naming ``dest`` (or the path inside it) where it names the temporary (or a path
    inside it, or nothing) as the path that failed."""
    filename = os.fsdecode(err.filename) if err.filename is not None else None
    if filename is not None and filename.startswith(str(tmp) + os.sep):
        named = str(dest) + filename[len(str(tmp)):]
    elif filename == str(tmp) or (filename is None and ("'" not in str(err)
                                                        or tmp.name in str(err))):
        named = str(dest)
    else:
        return err
    code = err.errno
    return OSError(code, os.strerror(code) if code else str(err), named)


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass
