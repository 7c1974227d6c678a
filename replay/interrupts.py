"""Ctrl-C that stops a DuckDB query at once, instead of when it ends.

DuckDB's Python client does not notice SIGINT while a query runs: Python's handler runs only
when the main thread comes back to Python, so a derivation of two minutes would ignore Ctrl-C
for two minutes.  ``install`` (the command line calls it; a notebook keeps its own handling)
asks Python's signal handler to write each signal's number to a socket as well
(``signal.set_wakeup_fd``), and a thread waiting on that socket interrupts every DuckDB
connection registered with ``interruptible``.  The query then stops, and the main thread raises
``KeyboardInterrupt`` or DuckDB's ``RuntimeError("Query interrupted")``, which the command line
reports as ``replay: interrupted``.

SIGTERM, which ``timeout``, ``kill``, batch systems and Kubernetes send to stop a process, and
SIGHUP, which a closed terminal sends, are taken as Ctrl-C: without a handler they ended the
process where it stood, and a run's partial directory stayed behind until the next command that
wrote into the same folder.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import weakref
from collections.abc import Iterator
from types import FrameType
from typing import Any, TypeVar

Connection = TypeVar("Connection")

_connections: weakref.WeakSet = weakref.WeakSet()
_installed = False
_received = threading.Event()  # a signal of ``STOPS`` has arrived since ``install``
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # the signals taken as Ctrl-C


def install() -> None:
    """Relay Ctrl-C to the registered connections, from now on (main thread only; once).

    A SIGHUP the process was started ignoring stays ignored: ``nohup`` ignores it for a command
    meant to outlive its terminal.  SIGINT and SIGTERM are taken whatever the process was
    started with (a script's background job starts with SIGINT ignored, and ``kill -INT`` of
    it stopped replay, with its cleanup, before SIGHUP and SIGTERM were taken too)."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    receive, send = socket.socketpair()
    send.setblocking(False)
    signal.set_wakeup_fd(send.fileno(), warn_on_full_buffer=False)
    for stop in STOPS:
        if stop != signal.SIGHUP or signal.getsignal(stop) is not signal.SIG_IGN:
            signal.signal(stop, _on_sigint)
    sys.unraisablehook = _quiet_about_interrupts(sys.unraisablehook)
    threading.Thread(target=_relay, args=(receive, send), name="replay-interrupts",
                     daemon=True).start()
    _installed = True


def _quiet_about_interrupts(hook: Any) -> Any:
    """``hook``, but for the ``KeyboardInterrupt`` of a signal that landed where Python cannot
    raise it (an object's finaliser, a library's callback: "Exception ignored in:
    'DataTypeClass'" and a traceback on stderr, seen in one SIGTERM of a run in CI).  Nothing
    is lost: ``checkpoint`` raises it again at the next step."""
    def quiet(unraisable: Any) -> None:
        if not (isinstance(unraisable.exc_value, KeyboardInterrupt) and _received.is_set()):
            hook(unraisable)
    return quiet


def received() -> bool:
    """Whether Ctrl-C has arrived since ``install``: whatever was raised then was raised by it
    (a native library can turn the ``KeyboardInterrupt`` into an exception of its own)."""
    return _received.is_set()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _received.set()
    signal.default_int_handler(signum, frame)


def checkpoint() -> None:
    """Raise again the ``KeyboardInterrupt`` of a Ctrl-C that arrived since ``install`` and
    that nothing is acting on.

    Python raises it wherever the main thread is, and a library that runs Python code may drop
    it: pyarrow's ``pa.array`` of a Python list tries to import ``dateutil`` on every call and
    discards the import's error, so a ``KeyboardInterrupt`` raised while that import searched
    ``sys.path`` vanished (one Ctrl-C of ``replay run`` in about a hundred: the run went on and
    exited 0).  So the places that begin a step or publish a result call this: ``hold`` (every
    table part handed to its writer, every numba compilation) and ``replay.atomic`` before it
    renames a result into place.  Only in the main thread's normal flow: while an exception is
    handled, one is on its way out already, and the cleanup it runs must not be cut short."""
    if (_received.is_set() and sys.exc_info()[1] is None
            and threading.current_thread() is threading.main_thread()):
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, then deliver it as it would have been.

    For short steps that must not stop half-way: handing work to a thread, or waiting for the
    threads that write a run's files.  A ``KeyboardInterrupt`` raised inside a lock's acquire
    can leave the lock held (the next ``submit`` then waits for ever), and one raised while
    waiting lets the process unwind, free memory and exit under threads still writing (seen:
    a segmentation fault, a run's Parquet columns of different lengths).  Outside the main
    thread, which Python never interrupts, this does nothing."""
    hold()
    try:
        yield
    finally:
        release()


_holding = 0  # how many ``hold``s (of the main thread) are not yet released
_held: list[int] = []  # the signals of ``STOPS`` that arrived meanwhile
_handlers_before: dict[int, Any] = {}  # the handlers the outermost ``hold`` found


def hold() -> None:
    """Hold Ctrl-C until the matching ``release`` (holds nest); ``deferred`` as two calls, for a
    library's start and end callbacks (``replay.jit``).  Main thread only, like ``deferred``.
    A Ctrl-C that came before and was swallowed is raised first (``checkpoint``)."""
    global _holding
    if threading.current_thread() is not threading.main_thread():
        return
    checkpoint()
    if _holding == 0:
        for stop in STOPS:
            _handlers_before[stop] = signal.signal(stop, lambda signum, frame: _held.append(signum))
    _holding += 1


def release() -> None:
    """End a ``hold``; the last one delivers a Ctrl-C that arrived meanwhile."""
    global _holding
    if threading.current_thread() is not threading.main_thread() or _holding == 0:
        return
    _holding -= 1
    if _holding == 0:
        for stop in STOPS:
            signal.signal(stop, _handlers_before.pop(stop))
        if _held:
            first = _held[0]
            _held.clear()
            signal.raise_signal(first)  # to the handler the hold found


def interruptible(connection: Connection) -> Connection:
    """``connection`` (a DuckDB connection), interrupted by Ctrl-C once ``install`` ran."""
    _connections.add(connection)
    return connection


def _relay(receive: socket.socket, send: socket.socket) -> None:
    """Interrupt every live connection whenever a signal of ``STOPS`` arrives; ``send`` is
    kept open here."""
    while True:
        try:
            signals = receive.recv(64)
        except OSError:
            return
        if not signals:
            return
        if any(stop in signals for stop in STOPS):
            for connection in list(_connections):
                with contextlib.suppress(Exception):  # closed meanwhile
                    connection.interrupt()
