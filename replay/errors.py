"""The one exception type that means "the user's input is wrong", and how operating-system errors
are told to the user.

The command line prints a ``ReplayError`` as a single line and exits non-zero; so it does an
``OSError`` (a full disk, a read-only folder, a file where a folder should be), phrased by
``os_error_message`` as ``PATH: cause``.  Any other exception is a bug and keeps its traceback.
Messages say what is wrong and where (file, line, column, key).
"""

from __future__ import annotations

import errno as errnos
import os
import re

# pyarrow's OSErrors carry an errno but no filename: "Failed to open local file '/x/y'. Detail:
# [errno 13] Permission denied"; the path is the first quoted one.
_QUOTED_PATH = re.compile(r"'([^']+)'")
_DETAIL_ERRNO = re.compile(r"\[errno (\d+)\]", re.IGNORECASE)


class ReplayError(Exception):
    """Bad input, bad configuration or an unusable file, described in one line for the user."""


def os_error_message(err: OSError) -> str:
    """``PATH: cause`` for an operating-system error, in one line (``cause`` as the system says
    it: "No space left on device"); the path is the one the error names, if any."""
    code = err.errno
    if code is None:
        found = _DETAIL_ERRNO.search(str(err))
        code = int(found.group(1)) if found else None
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
