"""A view's informer (``View``'s hand-over and catch-up) against its plain definition.

``View`` takes the deliveries of idle kinds (``IDLE_KINDS``: creates, Gödel's dispatch patches,
heartbeats, other resources) with one ``deque.append`` and never applies them, applies the others
through a table by kind, and finds the oldest write not yet applied lazily, from the order the
writes were sent.  ``SlowView`` below is the definition it must match, written plainly: every
delivery goes into its informer's inbox and is applied one at a time by one ``_apply``, and the
writes not yet applied are kept in the order sent, those applied out of that order set aside.
Both are driven with the same deliveries (made now, or held back and delivered later, in any
order an informer's applied times allow) and read after every step; whole what-if replays with
either are compared table by table.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import models
from replay.engine import simulation
from replay.engine.cluster import NODE_KINDS, Pod, Truth, Write, WriteKind
from replay.engine.config import load_config
from replay.engine.pipeline import Delivery, Source
from replay.engine.scheduler import GIVES_BACK
from replay.engine.view import IDLE_KINDS, View
from replay.trace.synth import SynthSpec, synthesize
from replay.trace.validate import read_trace

_INFORMER = {kind: 0 if kind in NODE_KINDS else 2 if kind == WriteKind.OTHER else 1
             for kind in WriteKind}
_LEAVES = {WriteKind.POD_DELETE, WriteKind.POD_REJECT, WriteKind.POD_FAIL}


class SlowView(View):
    """The informer as defined: every delivery in its inbox, applied one at a time."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._plain_inboxes: tuple[deque[tuple[int, Write]], ...] = (deque(), deque(), deque())
        self._unapplied: deque[Write] = deque()  # sent, not yet applied, in the order sent ...
        self._applied_early: set[int] = set()  # ... but for these rvs, already applied

    def _expect(self, write: Write) -> None:
        self._unapplied.append(write)

    def _takers_by_kind(self) -> tuple[Any, ...]:
        return tuple(self._take_now for _ in WriteKind)

    def _take_now(self, delivery: Delivery) -> None:
        self._unapplied.append(delivery[2])
        self._deliver_late(delivery)

    def _deliver_late(self, delivery: Delivery) -> None:
        write = delivery[2]
        self._plain_inboxes[_INFORMER[write.kind]].append((delivery[6], write))

    def _catch_up(self) -> None:
        now = self._clock()
        unapplied = self._unapplied
        for inbox in self._plain_inboxes:
            while inbox and inbox[0][0] <= now:
                applied, write = inbox.popleft()
                self._apply(write, applied)
                if unapplied and unapplied[0] is write:
                    unapplied.popleft()
                    early = self._applied_early
                    while early and unapplied and unapplied[0].rv in early:
                        early.remove(unapplied.popleft().rv)
                else:
                    self._applied_early.add(write.rv)

    def oldest_unapplied(self) -> int | None:
        self._catch_up()
        return self._unapplied[0].commit if self._unapplied else None

    def next_due(self, kinds: Collection[WriteKind]) -> int | None:
        self._catch_up()
        due = [next((applied for applied, write in inbox if write.kind in kinds), None)
               for inbox in self._plain_inboxes]
        return min((t for t in due if t is not None), default=None)

    def _apply(self, write: Write, now: int) -> None:
        kind, pod, version = write.kind, write.pod, write.node_version
        if version and version > self._version[write.node]:
            self._version[write.node] = version
        if kind == WriteKind.POD_BIND or (kind == WriteKind.POD_ASSUME and self.counts_assumed):
            assert pod is not None
            self._place(pod, write.node, now)
        elif kind in _LEAVES:
            assert pod is not None
            if self._assumed:
                self._forget(pod, now)
            node = self._placed.pop(pod, None)
            if node is not None:
                self._take(node, pod.request, 1)
        elif kind == WriteKind.NODE_SET:
            self._set_node(write.node, write.alloc)
        elif kind == WriteKind.NODE_DELETE:
            self._set_node(write.node, None)


NODES = 3
PODS = 4
POD_KINDS = [k for k in WriteKind if k not in NODE_KINDS and k != WriteKind.OTHER]

# One step: a write (its kind, pod, node, and its delivery: made now with a delay, or held by
# its watch, expected, or by its client queue, not expected), the delivery of a held write
# (which one, its delay), time passing, or an own assumption
_write = st.tuples(st.just("write"), st.sampled_from(list(WriteKind)), st.integers(0, PODS - 1),
                   st.integers(0, NODES - 1),
                   st.one_of(st.integers(0, 30), st.sampled_from(["watch", "queue"])))
_late = st.tuples(st.just("late"), st.integers(0, 20), st.integers(0, 30))
_tick = st.tuples(st.just("tick"), st.integers(0, 25))
_assume = st.tuples(st.sampled_from(["assume", "forget"]), st.integers(0, PODS - 1),
                    st.integers(0, NODES - 1))
steps = st.lists(st.one_of(_write, _write, _late, _tick, _assume), max_size=60)


def _reads(view: View) -> tuple[Any, ...]:
    snapshot = view.snapshot()
    return (snapshot.alloc.tolist(), snapshot.free.tolist(), snapshot.present.tolist(),
            snapshot.version.tolist(), view.oldest_unapplied(), view.next_due(GIVES_BACK),
            view.next_due(IDLE_KINDS), view.next_due({WriteKind.POD_ASSUME}), view.give_backs)


@settings(max_examples=300, deadline=None)
@given(steps, st.booleans())
def test_view_matches_its_definition(script, counts_assumed):
    now = [1_000]
    fast = View(NODES, lambda: now[0], counts_assumed)
    slow = SlowView(NODES, lambda: now[0], counts_assumed)
    forgotten: dict[View, list[tuple[int, int]]] = {fast: [], slow: []}
    for view in (fast, slow):
        view.on_forget = (lambda seen: lambda pod, at: seen.append((pod.index, at)))(
            forgotten[view])
    truth = Truth([f"n{i}" for i in range(NODES)])
    pods = [Pod(i, None, f"p{i}", (100, 1 << 20, 0), 0, -1, None, None, 0) for i in range(PODS)]
    last = [0, 0, 0]  # per informer: the last applied time handed over
    held: list[Write] = []
    rv = 0

    def deliver(write: Write, delay: int, late: bool) -> None:
        informer = _INFORMER[write.kind]
        last[informer] = max(now[0] + delay, last[informer])
        delivery = (0, write.rv, write, now[0], now[0], now[0], last[informer], Source.WATCH,
                    False)
        for view in (fast, slow):
            if late:
                view._deliver_late(delivery)
            else:
                view._takers_by_kind()[write.kind](delivery)

    for step in script:
        if step[0] == "write":
            _, kind, pod, node, delay = step
            rv += 1
            alloc = (1000 * (1 + rv % 3), 1 << 30, 0) if kind == WriteKind.NODE_SET else None
            write = Write(rv, now[0], kind, pods[pod] if kind in POD_KINDS else None,
                          node, "test", 0, -1, 200, alloc)
            truth.apply(write)
            if delay in ("watch", "queue"):
                held.append(write)
                for view in (fast, slow):
                    if delay == "watch":
                        view._expect(write)
            else:
                deliver(write, delay, late=False)
        elif step[0] == "late" and held:
            deliver(held.pop(step[1] % len(held)), step[2], late=True)
        elif step[0] == "tick":
            now[0] += step[1]
        elif step[0] == "assume":
            for view in (fast, slow):
                view.assume(pods[step[1]], step[2])
        elif step[0] == "forget":
            for view in (fast, slow):
                view.forget(pods[step[1]])
        assert _reads(fast) == _reads(slow)
        assert [fast.has_placed(p) for p in pods] == [slow.has_placed(p) for p in pods]
        assert [fast.assumes(p) for p in pods] == [slow.assumes(p) for p in pods]
        assert forgotten[fast] == forgotten[slow]


def test_idle_kinds_change_nothing_in_the_truths_versions():
    """An idle kind's delivery is never applied, so the truth must stamp no node version on it."""
    truth = Truth(["n0"])
    pod = Pod(0, None, "p0", (1, 1, 0), 0, -1, None, None, 0)
    for rv, kind in enumerate(WriteKind, start=1):
        write = Write(rv, 0, kind, None if kind in NODE_KINDS or kind == WriteKind.OTHER else pod,
                      0, "test", 0, -1, 200, (1000, 1000, 0))
        truth.apply(write)
        assert (write.node_version == 0) or kind not in IDLE_KINDS


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("view") / "trace.parquet"
    synthesize(SynthSpec(nodes=6, pods=120, arrival_rate=40.0, seed=5), path)
    return read_trace(path)


def _tables(trace: pl.DataFrame, model: str, config_text: str | None, tmp_path) -> list[Any]:
    config_path = None
    if config_text is not None:
        config_path = tmp_path / "config.toml"
        config_path.write_text(config_text)
    config = load_config(config_path, model=model)
    replay = models.load(model)(config.model_params)
    watchers = (list(config.watchers) if config.watchers is not None
                else replay.default_watchers(trace))
    return list(replay.tables(trace, config, watchers))


# A watch buffer of 2 and a slow watcher: watches fill, terminate and re-watch or re-list, so
# deliveries are held back and handed over late
HELD = """
[stages.watcher_queue]
buffer = 2
service = { dist = "exponential", mean_ms = 3.0 }
[dispatch]
budget_refill_ms_per_s = 1
"""

# Gödel's schedulers behind a DeltaFIFO with a slow handler: a pod's writes queued together are
# popped together, at the first's place (applied out of the order sent)
MERGED = "".join(f"""
[[watchers]]
name = "godel-scheduler-{i}"
role = "scheduler"
client_queue = "delta_fifo"
[watchers.stages.handler]
service = {{ dist = "exponential", mean_ms = 20.0 }}
""" for i in range(3)) + """
[[watchers]]
name = "godel-binder"
role = "binder"
[[watchers]]
name = "godel-dispatcher"
role = "dispatcher"
resources = ["pods"]
"""


@pytest.mark.parametrize("model, config_text", [("godel", None), ("godel", HELD),
                                                ("godel", MERGED), ("kube", None),
                                                ("omega", None), ("peer", HELD)])
def test_replays_with_the_definition_are_identical(small_trace, tmp_path, monkeypatch, model,
                                                   config_text):
    fast = _tables(small_trace, model, config_text, tmp_path)
    monkeypatch.setattr(simulation, "View", SlowView)
    slow = _tables(small_trace, model, config_text, tmp_path)
    assert [name for name, _ in fast] == [name for name, _ in slow]
    for (name, a), (_, b) in zip(fast, slow):
        a = a if isinstance(a, pl.DataFrame) else pl.from_arrow(a)
        b = b if isinstance(b, pl.DataFrame) else pl.from_arrow(b)
        assert a.equals(b), name
    if config_text == HELD:  # deliveries were held back: watches were terminated
        assert dict(fast)["watch_terminations"].height > 0
    if config_text == MERGED:  # some writes were applied before others sent earlier
        deliveries = pl.from_arrow(dict(fast)["deliveries"]).sort("watcher", "rv")
        assert deliveries.select((pl.col("applied_ts").diff().over("watcher")
                                  < pl.duration(microseconds=0)).any()).item()
