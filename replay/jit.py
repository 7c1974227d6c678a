"""numba's ``njit`` for this project's kernels, with Ctrl-C held while numba compiles.

A Ctrl-C that lands while numba compiles a kernel, or loads one from its cache, raises the
``KeyboardInterrupt`` inside llvmlite's ctypes callbacks or half-way through numba's records of
what it has compiled.  Python prints and drops an exception raised in a ctypes callback, so the
command went on and finished (exit 0, a traceback on stderr), or failed a moment later with
numba's ``RuntimeError: no compiled object yet`` and a traceback.  This happened in 8 of 30
Ctrl-Cs of ``replay run`` on a machine whose numba cache was empty, which CI's fresh clone always
is.

So every kernel module takes ``njit`` from here (which also compiles a kernel without numba's
cache where it has nowhere to keep one), and importing this module registers a listener
with numba's event API (``numba.core.event``) that holds Ctrl-C from the moment numba asks for
its compiler lock until it gives it back (``replay.interrupts.hold``).  numba holds that lock
for every compilation and every load from its cache, and for nothing else, so Ctrl-C is late
by one compilation at most (seconds, the first time on a machine) and a call of a compiled
kernel costs nothing more.  A compiled kernel does not see Ctrl-C anyway: Python delivers it
when the call returns.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numba
from numba.core import event
from numba.core.registry import cpu_target

from replay import interrupts

__all__ = ["UNCACHED", "compiled_entry", "initialize", "njit"]

# The kernels compiled without numba's cache, in this process: numba found no folder to keep it
# in (the package installed read-only, as in a container with a read-only root file system,
# and no writable user cache directory).
UNCACHED: list[str] = []


def njit(*args: Any, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """numba's ``njit`` decorator, except that a kernel numba cannot cache is compiled without
    its cache (again in each process) rather than failing the import with numba's
    ``RuntimeError: cannot cache function ...: no locator available`` (``UNCACHED`` names it)."""
    if args and callable(args[0]):  # njit(function), not njit(signature, ...)(function)
        return njit(*args[1:], **options)(args[0])
    decorate = numba.njit(*args, **options)

    def cached_if_possible(function: Callable[..., Any]) -> Any:
        try:
            return decorate(function)
        except RuntimeError as err:
            if not options.get("cache") or "no locator available" not in str(err):
                raise
        UNCACHED.append(f"{function.__module__}.{function.__qualname__}")
        return numba.njit(*args, **{**options, "cache": False})(function)
    return cached_if_possible


def compiled_entry(function: Callable[..., object], signature: str) -> Callable[..., object]:
    """``function`` compiled for its one ``signature`` when imported (from numba's cache), called
    through the compiled function's own entry point: numba's dispatcher would match every
    argument's type on every call (0.85 against 0.58 µs a call of the fan-out, 7 arrays and 4
    integers).  ``entry_point`` is numba's own attribute, not its documented API: the
    dispatcher, slower by its type matching, is the fallback if a numba release drops it."""
    compiled = njit(signature, cache=True, nogil=True)(function)
    return getattr(compiled.overloads[compiled.signatures[0]], "entry_point", compiled)


@cache
def initialize() -> None:
    """Load what numba loads at the first compilation, or the first kernel from its cache, of a
    process: its typing and lowering registries, imports of its own (0.14 s).  ``run_replay``
    calls it once its inputs are checked (a refused run does not wait for it) and leaves it
    out of its replay step's clock, so that the step times the replay, not numba's start, as it
    times no import either: since the views' kernels are no longer loaded on import
    (``viewkernel.compiled``), an observe replay's first kernel paid it inside the step."""
    cpu_target.target_context.refresh()


class _HoldCtrlC(event.Listener):
    """Ctrl-C held while numba holds its compiler lock (the lock nests; so do the holds)."""

    def on_start(self, _: event.Event) -> None:
        interrupts.hold()

    def on_end(self, _: event.Event) -> None:
        interrupts.release()


event.register("numba:compiler_lock", _HoldCtrlC())
