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

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt options
KEEP_BYTES = 1 << 30  # both thresholds while freed memory is kept
# Both thresholds afterwards.  glibc's own are adaptive (the mmap threshold rises to the size of
# each mapped block freed, up to 32 MiB on 64-bit systems, and the trim threshold to twice it),
# and setting one with mallopt turns that off for good; so afterwards they are where the
# adaptive ones settle in a process that frees large arrays.  (128 KiB, where they start, made
# every array above it a fresh mapping: a derivation after a replay faulted in 4.5M pages instead
# of 2.2M.)
AFTER_MMAP_BYTES, AFTER_TRIM_BYTES = 32 << 20, 64 << 20

_lock = threading.Lock()
_depth = 0  # how many keeping_freed_memory() are open: only the outermost sets and resets
_huge_depth = 0  # how many without_huge_pages() are open: only the outermost switches
_huge_before = True  # numpy's setting when the outermost began


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
    global _depth
    libc = _libc()
    with _lock:
        _depth += 1
        if _depth == 1 and libc is not None:
            for option in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD):
                libc.mallopt(option, KEEP_BYTES)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and libc is not None:
                libc.mallopt(M_MMAP_THRESHOLD, AFTER_MMAP_BYTES)
                libc.mallopt(M_TRIM_THRESHOLD, AFTER_TRIM_BYTES)
                libc.malloc_trim(0)


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
    without them against 4.0-4.7 s with (six pairs alternated; benchmarks/README.md,
    twenty-ninth round).  numpy has no public switch for this; where its private one is gone,
    nothing changes."""
    global _huge_depth, _huge_before
    switch = huge_page_switch()
    with _lock:
        _huge_depth += 1
        if _huge_depth == 1 and switch is not None:
            _huge_before = switch(False)
    try:
        yield
    finally:
        with _lock:
            _huge_depth -= 1
            if _huge_depth == 0 and switch is not None:
                switch(_huge_before)


@functools.cache
def huge_page_switch() -> Callable[[bool], bool] | None:
    """numpy's ``_set_madvise_hugepage`` (it returns the setting it replaces), if it has one."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        with contextlib.suppress(ImportError):
            switch = getattr(importlib.import_module(module), "_set_madvise_hugepage", None)
            if callable(switch):
                return switch  # type: ignore[no-any-return]
    return None
