"""Memory for a replay's and a derivation's arrays: glibc's malloc keeps freed memory for the next
arrays, given back to the system at moments the caller chooses; and numpy asks for no huge pages.

A replay and a derivation each make and drop hundreds of arrays of millions of elements.  glibc's
malloc maps each one above its mmap threshold afresh and unmaps it when freed, and trims the freed
memory at the top of its heap above its trim threshold, so that most new arrays are faulted in
and zeroed page by page again: 10-15 % of a replay's CPU time, and on this project's virtual
machine, which charges a page the process has not touched since it was freed dearly, twice the
page faults and a fifth more wall time for a derivation.  Outside glibc nothing here does
anything.  Huge pages: ``without_huge_pages``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt options
KEEP_BYTES = 1 << 30  # both thresholds while freed memory is kept
# Both thresholds afterwards.  glibc's own are adaptive (the mmap threshold rises to the size of
# each mapped block freed, up to 32 MiB on 64-bit systems, and the trim threshold to twice it),
# and setting one with mallopt turns that off for good; so afterwards they are where the
# adaptive ones settle in a process that frees large arrays.  (128 KiB, where they start, made
# every array above it a fresh mapping: a derivation after a replay faulted in 4.5M pages instead
# of 2.2M.)
AFTER_MMAP_BYTES, AFTER_TRIM_BYTES = 32 << 20, 64 << 20


class _Outermost:
    """A setting that only the outermost of nested (or concurrent) ``held`` blocks makes and
    undoes: the first to open calls ``make``, the last to close ``undo`` with what ``make``
    returned."""

    _lock = threading.Lock()  # one for every setting: they are made rarely

    def __init__(self) -> None:
        self.depth, self.made = 0, None

    @contextlib.contextmanager
    def held(self, make: Callable[[], Any], undo: Callable[[Any], object]) -> Iterator[None]:
        with self._lock:
            self.depth += 1
            if self.depth == 1:
                self.made = make()
        try:
            yield
        finally:
            with self._lock:
                self.depth -= 1
                if self.depth == 0:
                    undo(self.made)


_freed_memory_kept, _huge_pages_off = _Outermost(), _Outermost()


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc's functions, if this process has them (``mallopt``, ``malloc_trim``); looked up
    once, not at every give-back."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


@contextlib.contextmanager
def keeping_freed_memory() -> Iterator[None]:
    """Keep the memory freed while this lasts for the arrays that follow; then give back what is
    free and set the thresholds to ``AFTER_*``.  Nested, only the outermost one does either."""
    libc = _libc()
    if libc is None:
        yield
        return

    def keep() -> None:
        for option in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD):
            libc.mallopt(option, KEEP_BYTES)

    def give_back_all(_: None) -> None:
        libc.mallopt(M_MMAP_THRESHOLD, AFTER_MMAP_BYTES)
        libc.mallopt(M_TRIM_THRESHOLD, AFTER_TRIM_BYTES)
        libc.malloc_trim(0)

    with _freed_memory_kept.held(keep, give_back_all):
        yield


def give_back() -> None:
    """Give the pages malloc holds free back to the system now (``malloc_trim``)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@contextlib.contextmanager
def without_huge_pages() -> Iterator[None]:
    """numpy's huge pages off while this lasts (as ``NUMPY_MADVISE_HUGEPAGE=0`` would for the
    whole process), then as they were.  Nested, or open on several threads at once, only the
    outermost one switches them off and back.

    numpy asks the kernel for transparent huge pages for each array of 4 MiB or more.  Where the
    kernel compacts memory to find them when asked (defrag ``madvise``, the kernel's default
    since Linux 4.6, and this machine's), fresh arrays of millions of elements cost system time,
    the more the more fragmented the memory is; and on a virtual machine that hands free 2 MiB
    blocks back to its host (this one does), a huge page is likely one the host must back again.
    A derivation makes hundreds: on the 1M-pod what-if run, while it spent 15-19 s of system
    time with them, it spent 9-10 s without, and 29-33 s of wall time against 37-44 s (three
    pairs alternated, user time the same).  The 1M-pod observe replay step took 3.3-3.6 s
    without them against 4.0-4.7 s with (six pairs alternated; benchmarks/ROUNDS.md,
    twenty-ninth round).  numpy has no public switch for this; where its private one is gone,
    nothing changes."""
    switch = huge_page_switch()
    if switch is None:
        yield
        return
    with _huge_pages_off.held(lambda: switch(False), switch):  # (switch returns the old setting)
        yield


@functools.cache
def huge_page_switch() -> Callable[[bool], bool] | None:
    """numpy's ``_set_madvise_hugepage`` (it returns the setting it replaces), if it has one."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        with contextlib.suppress(ImportError):
            switch = getattr(importlib.import_module(module), "_set_madvise_hugepage", None)
            if callable(switch):
                return switch  # type: ignore[no-any-return]
    return None
