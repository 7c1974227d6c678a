"""Gangs: pods that share a ``group`` are placed all or nothing, so whoever places them first
waits until every member has arrived (Gödel's PodGroup, kube's coscheduling plugin).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")


class Gathering(Generic[Item]):
    """Members of gangs arriving one at a time, released together once the gang is complete.

    ``size_of(group)`` is the gang's size; an item of no group, or of a group of one, is released
    at once."""

    def __init__(self, size_of: Callable[[str], int]):
        self._size_of = size_of
        self._waiting: dict[str, list[Item]] = {}

    def add(self, group: str | None, item: Item,
            still_waiting: Callable[[Item], bool] | None = None) -> list[Item] | None:
        """``item`` has arrived: its whole gang if it is now complete, else None (it waits).
        ``still_waiting`` drops members that left meanwhile (a deleted pod no longer counts)."""
        size = self._size_of(group) if group else 1
        if group is None or size <= 1:
            return [item]
        waiting = self._waiting.setdefault(group, [])
        waiting.append(item)
        if still_waiting is not None:
            waiting[:] = [member for member in waiting if still_waiting(member)]
        if len(waiting) < size:
            return None
        del self._waiting[group]
        return waiting
