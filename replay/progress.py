"""Progress bars for long work: on stderr, and only when stderr is a terminal."""

from __future__ import annotations

import sys

from tqdm import tqdm


def progress(total: int | None, desc: str, unit: str = "it") -> tqdm:
    """A tqdm bar that stays silent when stderr is redirected (CI logs, pipes, tests)."""
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, file=sys.stderr,
                disable=not sys.stderr.isatty(), leave=False, mininterval=0.5)
