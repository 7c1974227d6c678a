"""The one exception type that means "the user's input is wrong".

The command line prints a ``ReplayError`` as a single line and exits non-zero; any other exception
is a bug and keeps its traceback.  Messages say what is wrong and where (file, line, column, key).
"""


class ReplayError(Exception):
    """Bad input, bad configuration or an unusable file, described in one line for the user."""
