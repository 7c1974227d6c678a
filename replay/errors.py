"""The one exception type that means "the user's input is wrong", and how operating-system errors
are told to the user.

The command line prints a ``ReplayError`` as a single line and exits non-zero; so it does an
``OSError`` (a full disk, a read-only folder, a file where a folder should be), phrased by
``os_error_message`` as ``PATH: cause``.  Any other exception is a bug and keeps its traceback.
Messages say what is wrong and where (file, line, column, key).
"""

from __future__ import annotations

import contextlib
import errno as errnos
import os
import re
from collections.abc import Iterator

# pyarrow's OSErrors carry an errno but no filename: "Failed to open local file '/x/y'. Detail:
# [errno 13] Permission denied"; the path is the first quoted one.
_QUOTED_PATH = re.compile(r"'([^']+)'")
# The system's error in a library's message: pyarrow's "[errno 13]", DuckDB's JSON
# ('..."errno":"28"}'), polars' as Rust says it ("(os error 28)"); or, as DuckDB's
# 'Cannot open file "x": Permission denied', only its text at the end.
_LIBRARY_ERRNO = re.compile(r'\[errno (\d+)\]|"errno"\s*:\s*"(\d+)"|\(os error (\d+)\)',
                            re.IGNORECASE)
_CAUSES = {os.strerror(code): code for code in sorted(errnos.errorcode)}


class ReplayError(Exception):
    """Bad input, bad configuration or an unusable file, described in one line for the user."""


def unreadable(path: str | os.PathLike, what: str, err: OSError | UnicodeDecodeError) -> ReplayError:
    """The one line for a ``what`` file (a config file, a query) that could not be read as text:
    a binary file, such as a trace given in its place, is "not text"; otherwise the system's
    cause."""
    if isinstance(err, UnicodeDecodeError):
        return ReplayError(f"{os.fsdecode(path)}: not text (byte {err.start}), so not a {what}")
    return ReplayError(f"{os.fsdecode(path)}: cannot read the {what} ({err.strerror or err})")


def os_error_message(err: OSError) -> str:
    """``PATH: cause`` for an operating-system error, in one line (``cause`` as the system says
    it: "No space left on device"); the path is the one the error names, if any."""
    code = err.errno if err.errno is not None else os_error_in(str(err))
    cause = os.strerror(code) if code else (err.strerror or str(err) or type(err).__name__)
    if code in (errnos.ENOTEMPTY, errnos.EEXIST) and err.filename2:
        cause += " (another process wrote it meanwhile)"
    path = err.filename2 if code in (errnos.ENOTEMPTY, errnos.EEXIST) and err.filename2 \
        else err.filename
    if path is None:
        quoted = _QUOTED_PATH.search(err.strerror or str(err))
        path = quoted.group(1) if quoted else None
    text = f"{os.fsdecode(path)}: {cause}" if path is not None else cause
    return text.strip().splitlines()[0]


def os_error_in(message: str) -> int | None:
    """The system's error number that a library's error ``message`` reports, or None if it
    reports none."""
    found = _LIBRARY_ERRNO.search(message)
    if found:
        return int(next(number for number in found.groups() if number))
    return _CAUSES.get(message.strip().rpartition(": ")[2])


@contextlib.contextmanager
def system_errors(path: str | os.PathLike, *kinds: type[Exception]) -> Iterator[None]:
    """Raise an error of ``kinds`` that reports a system error as that ``OSError``, naming
    ``path``: DuckDB's and polars' writers report a full disk in errors of their own, and name
    their own temporary files in them, or no file at all."""
    try:
        yield
    except kinds as err:
        cause = os_error_in(str(err))
        if cause is None:
            raise
        raise OSError(cause, os.strerror(cause), os.fspath(path)) from None
