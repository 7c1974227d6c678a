"""Named random streams: every consumer of randomness draws from its own generator.

A stream is identified by the run's seed and a path of names (``("network", "scheduler-0")``), and
is derived with numpy's ``SeedSequence``.  Adding a stream, or drawing more from one, never shifts
another, so results cannot depend on iteration order, thread count or which features are on.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _name_key(name: str) -> int:
    """A stable 64-bit integer for a name (Python's ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def stream(seed: int, *names: str) -> np.random.Generator:
    """The generator for ``names`` under ``seed``; the same arguments always give the same draws."""
    key = tuple(_name_key(n) for n in names)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))
