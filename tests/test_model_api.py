"""The built-in models use only the engine's model API, as a plugin would.

- each model module imports from the engine only ``replay.engine.api`` (and from the layers below
  the engine, the model base classes and other models);
- it reads the engine's objects but never assigns to their attributes, and touches none of their
  private (``_``) names;
- every public name of the API is documented in docs/models.md;
- a copy of ``replay/models/kube.py`` installed as a plugin writes the built-in's tables byte for
  byte: the built-in needs nothing a plugin cannot have.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
import sys
import types
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import REPO, SAMPLE_TRACE, budget, dist_info
from replay.engine import api, core
from replay.engine.core import FAR_US, Deadlines, Environment

MODELS = REPO / "replay" / "models"
BUILT_IN = sorted(p for p in MODELS.glob("*.py") if p.name not in ("__init__.py", "base.py"))
ALLOWED_PREFIXES = ("replay.engine.api", "replay.models", "replay.trace", "replay.arrays",
                    "replay.rng", "replay.errors", "replay.limits")


def replay_imports(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [name for name in found if name == "replay" or name.startswith("replay.")]


def is_own(node: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the model's own object."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "super")


def violations(source: str) -> list[str]:
    """What a model module does that a plugin must not: imports from engine internals, private
    names of other objects, assignments to other objects' attributes."""
    tree = ast.parse(source)
    out = [f"imports {name}" for name in replay_imports(tree)
           if not name.startswith(ALLOWED_PREFIXES)]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__") and not is_own(node.value)):
            out.append(f"line {node.lineno}: uses the private .{node.attr}")
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for item in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if isinstance(item, ast.Attribute) and not is_own(item.value):
                    out.append(f"line {node.lineno}: assigns .{item.attr} of another object")
                if isinstance(item, ast.Subscript) and isinstance(item.value, ast.Attribute) \
                        and not is_own(item.value.value):
                    out.append(f"line {node.lineno}: assigns into .{item.value.attr} of "
                               "another object")
    return out


@pytest.mark.parametrize("path", BUILT_IN, ids=lambda p: p.stem)
def test_built_in_models_use_only_the_api(path):
    assert violations(path.read_text()) == []


@pytest.mark.parametrize("code, found", [
    ("from replay.engine.simulation import Simulation", "imports replay.engine.simulation"),
    ("def f(sim):\n    sim._pipeline.hop(0)", "uses the private ._pipeline"),
    ("def f(attempt):\n    attempt.committed = 3", "assigns .committed of another object"),
    ("def f(view, n):\n    view.free[:, n] -= 1", "assigns into .free of another object"),
])
def test_the_api_check_finds_what_models_used_to_do(code, found):
    assert any(found in v for v in violations(code))


def public_names() -> set[str]:
    names = set()
    for name in api.__all__:
        names.add(name)
        thing = getattr(api, name)
        if isinstance(thing, type):
            members = set(vars(thing))
            if dataclasses.is_dataclass(thing):
                members |= {f.name for f in dataclasses.fields(thing)}
            members |= set(getattr(thing, "__annotations__", {}))
            names |= {m for m in members if not m.startswith("_")}
    return names


def test_every_public_name_of_the_api_is_documented():
    docs = (REPO / "docs" / "models.md").read_text()
    skip = {"name", "value", "kind", "keys", "count", "index"}  # enum and tuple machinery
    missing = sorted(n for n in public_names() - skip
                     if not re.search(rf"`[^`]*\b{re.escape(n)}\b[^`]*`", docs))
    assert missing == []


def test_a_copy_of_kube_as_a_plugin_writes_the_same_tables(cli, tmp_path, monkeypatch):
    package = tmp_path / "kube_copy"
    package.mkdir()
    source = (MODELS / "kube.py").read_text().replace('name = "kube"', 'name = "kube-copy"')
    (package / "__init__.py").write_text(source)
    dist_info(tmp_path, "kube-copy", "[replay.models]\nkube-copy = kube_copy:KubeModel\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        args = ["-p", "schedulers=3", "-p", "policy=most-allocated"]
        for model in ("kube", "kube-copy"):
            result = cli("run", SAMPLE_TRACE, "--model", model, *args, "--out", tmp_path / model)
            assert result.code == 0, result.err
    finally:
        sys.modules.pop("kube_copy", None)
    tables = sorted(p.name for p in (tmp_path / "kube").glob("*.parquet"))
    assert "attempts.parquet" in tables and "capacity_windows.parquet" in tables
    for table in tables:
        assert (tmp_path / "kube" / table).read_bytes() == \
            (tmp_path / "kube-copy" / table).read_bytes(), table


def test_timers_cancel_and_the_core_steps_like_simpy():

    env, fired = Environment(10), []
    keep = env.at(20, fired.append, "kept")
    dropped = env.after(5, fired.append, "dropped")
    env.at(30, fired.append, "late")
    dropped.cancel()
    assert env.peek() == 20 and keep.pending
    assert env.step() and fired == ["kept"] and env.now == 20 and keep.fired
    env.run(until=25)
    assert env.now == 25 and fired == ["kept"]
    env.run()
    assert fired == ["kept", "late"] and not env.step() and env.peek() is None
    with pytest.raises(ValueError):
        env.at(1, fired.append, "past")


def test_cancelled_timers_are_swept_out_and_the_others_fire_in_order():
    from replay.engine.core import SWEEP_AT_LEAST
    env, fired = Environment(0), []
    count = 3 * SWEEP_AT_LEAST
    # many due at one time, in the near queue and the far one
    timers = [env.at(t % 97 * (FAR_US // 40), fired.append, t) for t in range(count)]
    for t, timer in enumerate(timers):
        if t % 3:
            timer.cancel()
            timer.cancel()  # (twice: counted once)
    assert len(env) <= count // 3 + SWEEP_AT_LEAST  # not all 2/3 still queued
    env.run()
    assert fired == [t for t in sorted(range(count), key=lambda t: (t % 97, t)) if t % 3 == 0]
    assert len(env) == 0 and env._cancelled == 0


class _PlainEnvironment:
    """The definition ``Environment`` keeps with its two queues: every timer in one list, the
    one due first (then set first) fired next."""

    def __init__(self, start: int):
        self.now, self._set = start, []

    def at(self, time, callback, *args):
        timer = types.SimpleNamespace(time=time, order=len(self._set), call=(callback, args),
                                      cancelled=False)
        timer.cancel = lambda: setattr(timer, "cancelled", True)
        self._set.append(timer)
        return timer

    call_at = at

    def run(self):
        while pending := [t for t in self._set if not t.cancelled]:
            timer = min(pending, key=lambda t: (t.time, t.order))
            self._set.remove(timer)
            self.now = timer.time
            timer.call[0](*timer.call[1])


def _fired(env, plan):
    """Run ``plan`` (per timer: its delay, whether it cancels the oldest timer still set and
    whether it is an ``at`` or a ``call_at``), two timers set by each timer that fires."""
    fired, steps, cancellable = [], iter(plan), []

    def fire(label):
        fired.append((label, env.now))
        for delay, cancels, call in itertools.islice(steps, 2):
            if cancels and cancellable:
                cancellable.pop(0).cancel()
            if call:
                env.call_at(env.now + delay, fire, len(fired) * 10 + len(cancellable))
            else:
                cancellable.append(env.at(env.now + delay, fire, len(fired) * 10 + 9))

    env.call_at(env.now, fire, -1)
    env.run()
    return fired, env.now


# the first far slot's start more than FAR_US after 5 (when ``_fired`` starts)
_SLOT_START = (FAR_US // (1 << core.SLOT_SHIFT) + 1) << core.SLOT_SHIFT


@settings(max_examples=budget(300), deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2, FAR_US - 1, FAR_US, FAR_US + 1,
                                           FAR_US + 2, _SLOT_START - 6, _SLOT_START - 5,
                                           2 * FAR_US, 3 * FAR_US + 1]),
                          st.booleans(), st.booleans()), max_size=60))
# a far timer due at a slot's start and a near one due then too, set later (so after it), while
# the far one waits in its slot
@example([(_SLOT_START - 6, False, True), (_SLOT_START - 5, False, True), (1, False, True)])
def test_near_and_far_timers_fire_in_due_time_then_order_set(plan):
    """Timers due more than FAR_US ahead wait in far slots; they still fire as if all were in
    one queue (ties at a microsecond included: delays that meet across the near queue and the
    slots; due times on either side of a slot's start, the run starting at 5)."""
    assert _fired(Environment(5), plan) == _fired(_PlainEnvironment(5), plan)
    # and with the cancelled timers swept out of the near queue and the slots at each chance
    with mock.patch.object(core, "SWEEP_AT_LEAST", 1):
        assert _fired(Environment(5), plan) == _fired(_PlainEnvironment(5), plan)


def _deadlines_run(plan, delay, own_timers):
    """Run ``plan`` (per step: the gap to the next step, and an action: add an item, discard
    the pending item at a place, or nothing) with ``Deadlines``, or with a timer of each item's
    own (``own_timers``): what fired, and when, and the run's end."""
    env, fired, pending, steps = Environment(7), [], [], iter(plan)
    due = lambda item: fired.append(("due", item, env.now))  # noqa: E731
    deadlines, timers = Deadlines(env, delay, due), {}

    def step(number):
        fired.append(("step", number, env.now))
        gap, action, place = next(steps, (None, None, None))
        if action == "add":
            pending.append(number)
            if own_timers:
                timers[number] = env.after(delay, due, number)
            else:
                deadlines.add(number)
        elif action == "discard" and pending:
            item = pending.pop(place % len(pending))
            if own_timers:
                timers.pop(item).cancel()
            else:
                deadlines.discard(item)
        if gap is not None:
            env.call_at(env.now + gap, step, number + 1)

    env.call_at(env.now, step, 0)
    env.run()
    return fired, env.now


@settings(max_examples=budget(300), deadline=None)
@given(st.sampled_from([10, FAR_US + 5]),
       st.lists(st.tuples(st.sampled_from([0, 1, 9, 10, 11, 30]),
                          st.sampled_from(["add", "discard", "nothing"]),
                          st.integers(0, 5)), max_size=40))
def test_deadlines_fire_as_the_items_own_timers_would(delay, plan):
    """``Deadlines`` (one timer at a time, in the order taken when each item was added) fires
    what a cancellable timer per item fires, in the same place among the other timers due at
    the same microsecond, and the run ends at the same time (no timer left for nothing)."""
    gaps = [(gap * delay // 10, action, place) for gap, action, place in plan]
    assert _deadlines_run(gaps, delay, False) == _deadlines_run(gaps, delay, True)


def test_models_import_nothing_of_the_engine_but_the_api():
    """The same rule for every file under replay/models, Path by Path (a new file is checked)."""
    for path in Path(MODELS).glob("*.py"):
        bad = [name for name in replay_imports(ast.parse(path.read_text()))
               if name.startswith("replay.engine") and name != "replay.engine.api"]
        assert bad == [], path.name
