"""Scheduler-cache models, found by name through the entry-point group ``replay.models``.

Built-in models register there in this project's ``pyproject.toml`` exactly as a third-party
package would in its own, so a user's package can add a model without touching this project.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from replay.errors import ReplayError
from replay.models.base import Model

GROUP = "replay.models"


def registered() -> dict[str, EntryPoint]:
    """Entry points of every registered model by name (not yet imported), sorted by name."""
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=GROUP):
        found.setdefault(point.name, point)
    return dict(sorted(found.items()))


def load(name: str) -> type[Model]:
    """The model class registered as ``name``; a one-line error if there is none or it is broken."""
    points = registered()
    if name not in points:
        raise ReplayError(f"no model named {name!r}; models: {', '.join(points) or 'none'}")
    try:
        model = points[name].load()
    except Exception as err:  # a third-party plugin may fail in any way on import
        raise ReplayError(f"model {name!r} ({points[name].value}) failed to load: {err}") from None
    if not (isinstance(model, type) and issubclass(model, Model)):
        raise ReplayError(f"model {name!r} ({points[name].value}) is not a replay Model class")
    return model
