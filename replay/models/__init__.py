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
    """Entry points of every registered model by name (not yet imported), sorted by name; of a
    name that several packages register, the first package's by name (``load`` refuses it)."""
    return {name: points[0] for name, points in registrations().items()}


def registrations() -> dict[str, list[EntryPoint]]:
    """Every distinct entry point of each model name, by package name: a plugin may register a
    name that another package, or this one, already has."""
    found: dict[str, dict[str, EntryPoint]] = {}
    for point in entry_points(group=GROUP):
        found.setdefault(point.name, {}).setdefault(point.value, point)
    return {name: sorted(points.values(), key=_package)
            for name, points in sorted(found.items())}


def _package(point: EntryPoint) -> str:
    return point.dist.name if point.dist is not None else "?"


def load(name: str) -> type[Model]:
    """The model class registered as ``name``; a one-line error if there is none, it is broken,
    or several packages register it (which one ran would depend on the order of sys.path, and a
    plugin would replace a built-in model without a word)."""
    found = registrations()
    if name not in found:
        raise ReplayError(f"no model named {name!r}; models: {', '.join(found) or 'none'}")
    if len(found[name]) > 1:
        packages = " and ".join(f"{_package(p)} ({p.value})" for p in found[name])
        raise ReplayError(f"model {name!r} is registered by {packages}: uninstall one, or "
                          "register the plugin's model under another name")
    point = found[name][0]
    try:
        model = point.load()
    except Exception as err:  # a third-party plugin may fail in any way on import
        raise ReplayError(f"model {name!r} ({point.value}) failed to load: {err}") from None
    if not (isinstance(model, type) and issubclass(model, Model)):
        raise ReplayError(f"model {name!r} ({point.value}) is not a replay Model class")
    return model
