"""SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014),
the mixer behind ``replay.rng``'s counter-based streams: its constants, and its finaliser (over
whole arrays here, compiled for one value at a time by ``replay.rngkernel``).  Its own module so
that the streams (``replay.rng``) and their compiled draws (``replay.rngkernel``) share them
without importing each other."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # the increment: 2**64 over the golden ratio
MIX_1 = np.uint64(0xBF58476D1CE4E5B9)  # the finaliser's multipliers
MIX_2 = np.uint64(0x94D049BB133111EB)


def mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser: a bijection of uint64 that scrambles every bit."""
    z = (z ^ (z >> np.uint64(30))) * MIX_1
    z = (z ^ (z >> np.uint64(27))) * MIX_2
    return z ^ (z >> np.uint64(31))
