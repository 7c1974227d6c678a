"""A view's capacity as its own placements change it (``assume``, ``forget``, ``holding``): the
snapshot the schedulers read must see every change made through the view's rows.  And as the
watch changes it: every read applies exactly the deliveries due by then.  And the view, its
deliveries handed over and applied by compiled loops (``viewkernel``), against its plain
definition a delivery at a time (``plain_view``)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from plain_view import PlainView

from replay.engine.cluster import NO_NODE, NODE_KINDS, Pod, Write, WriteKind
from replay.engine.view import Inboxes, View
from replay.engine.viewkernel import FIELDS
from replay.trace.synth import SynthSpec, synthesize
from conftest import budget

GIB = 1 << 30


def test_own_placements_change_the_snapshot_and_fits():
    view = View(2, lambda: 0)
    view._deliver(0, Write(1, 0, WriteKind.NODE_SET, None, 0, "t", 0, -1, 201,
                           (4000, 8 * GIB, 1000, 3)))
    pod = Pod(0, None, "p0", (1500, 2 * GIB, 500), 0, -1, None, None, 0)
    free = view.snapshot().free
    view.assume(pod, 0)
    assert free[:, 0].tolist() == [2500, 6 * GIB, 500, 2]
    assert view.fits(0, (2500, 6 * GIB, 500)) and not view.fits(0, (2501, 0, 0))
    with view.holding() as hold:
        hold(0, (1000, GIB, 0))
        assert free[:, 0].tolist() == [1500, 5 * GIB, 500, 1]
        assert view.fits(0, (0, 0, 0))
        hold(0, (0, 0, 0))
        assert free[:, 0].tolist() == [1500, 5 * GIB, 500, 0]
        assert not view.fits(0, (0, 0, 0))  # no room for another pod ("Too many pods")
    assert free[:, 0].tolist() == [2500, 6 * GIB, 500, 2]
    view.forget(pod)
    assert free[:, 0].tolist() == [4000, 8 * GIB, 1000, 3]
    assert free[:, 1].tolist() == [0, 0, 0, 0]
    best_effort = Pod(1, None, "p1", (0, 0, 0), 0, -1, None, None, 0)  # (no request set)
    zero = view.snapshot().zero_requests
    view.assume(best_effort, 0)
    with view.holding() as hold:
        hold(0, (0, GIB, 0))
        assert zero[:, 0].tolist() == [2, 1]
    assert zero[:, 0].tolist() == [1, 1] and zero[:, 1].tolist() == [0, 0]
    view.forget(best_effort)
    assert zero[:, 0].tolist() == [0, 0]


@settings(max_examples=budget(150), deadline=None)
@given(st.data())
def test_every_read_applies_exactly_the_deliveries_due(data):
    """Deliveries to the three informers (nodes, pods, another resource), each inbox in the
    order its applied times never decrease, and reads at times that never decrease: each read
    sees what applying every delivery due by then gives (``_due``, the earliest applied time
    left in any inbox, never hides one): per node its last allocatable and version applied,
    less the pods whose binding (or create on the node: a listed pod) is applied and whose
    delete is not (and one pod for each), and how many of those request no cpu, no memory."""
    nodes, now = 3, [0]
    view = View(nodes, lambda: now[0])
    pods = [Pod(i, None, f"p{i}", (100 * i, i % 2, 0), 0, -1, None, None, 0)
            for i in range(4)]
    last = {"nodes": 0, "pods": 0, "other": 0}  # each informer's last applied time
    sent: list[tuple[int, Write]] = []
    for rv in range(1, data.draw(st.integers(1, 30)) + 1):
        informer = data.draw(st.sampled_from(sorted(last)))
        last[informer] += data.draw(st.integers(0, 5))
        node = data.draw(st.integers(0, nodes - 1))
        if informer == "nodes":
            write = Write(rv, 0, WriteKind.NODE_SET, None, node, "t", 0, -1, 200,
                          (1000 * rv, 100 * rv, 0, rv % 3), node_version=rv)
        elif informer == "pods":
            kind = data.draw(st.sampled_from([WriteKind.POD_BIND, WriteKind.POD_DELETE,
                                              WriteKind.POD_CREATE]))  # (created on its node)
            write = Write(rv, 0, kind, data.draw(st.sampled_from(pods)), node, "t", 0, -1, 200)
        else:
            write = Write(rv, 0, WriteKind.OTHER, None, -1, "t", 0, -1, 200)
        view._deliver(last[informer], write)
        sent.append((last[informer], write))
        if data.draw(st.booleans()):
            now[0] += data.draw(st.integers(0, 6))
            snapshot = view.snapshot()
            assert (snapshot.free.tolist(), snapshot.version.tolist(),
                    snapshot.zero_requests.tolist()) == _applied_by(sent, now[0], nodes)


def _applied_by(sent: list[tuple[int, Write]], now: int, nodes: int
                ) -> tuple[list[list[int]], list[int], list[list[int]]]:
    """The free capacity (and room for pods), version and pods without a cpu or memory request
    per node once the
    deliveries due by ``now`` are applied, in the order sent (a binding counts from its
    application until its pod's delete is applied; a node's version is the highest
    applied)."""
    free = [[0] * nodes for _ in range(4)]
    zero = [[0] * nodes for _ in range(2)]
    version = [0] * nodes
    placed: dict[Pod, int] = {}
    for applied, write in sent:
        if applied > now:
            continue
        if write.kind == WriteKind.NODE_SET:
            for resource in range(4):
                free[resource][write.node] = write.alloc[resource]
            version[write.node] = max(version[write.node], write.node_version)
        elif write.kind in (WriteKind.POD_BIND, WriteKind.POD_CREATE):
            placed[write.pod] = write.node
        elif write.kind == WriteKind.POD_DELETE:
            placed.pop(write.pod, None)
    for pod, node in placed.items():
        for resource in range(3):
            free[resource][node] -= pod.request[resource]
        free[3][node] -= 1
        for resource in range(2):
            zero[resource][node] += pod.request[resource] == 0
    return free, version, zero


class _TinyInboxes(Inboxes):
    ROOM = 1  # every second entry makes room (moves a row's entries, or doubles every row)


class _TinyView(View):
    _FORGOTTEN = 1  # a catch-up that ends two assumptions takes two compiled calls


@settings(max_examples=budget(150), deadline=None)
@given(st.data(), st.booleans())
def test_a_view_is_its_plain_definition(data, tiny):
    """Two views sharing their inboxes (a scheduler's, which counts assumed pods, and a
    binder's), fed random writes of every kind, each handed to both at once (``Inboxes.push``,
    the compiled fan-out's hand-over) or to each alone (``_deliver``), some held back
    (``_expect``ed, handed over later, out of order), with assumptions made and forgotten and
    reads at times that never decrease: every read gives what the plain view gives (capacity,
    versions, presence, pods placed and assumed, give-backs, the oldest write not applied, the
    next delivery due of some kinds), and the assumptions end at the same times, in the same
    order.  ``tiny``: rows and buffers of one entry, so that every entry makes room, grows the
    pods' arrays or ends a compiled call."""
    nodes, now = 3, [0]
    inboxes = _TinyInboxes() if tiny else Inboxes()
    kind_of_view = _TinyView if tiny else View
    views = [kind_of_view(nodes, lambda: now[0], counts, inboxes) for counts in (True, False)]
    plains = [PlainView(nodes, lambda: now[0], counts) for counts in (True, False)]
    forgotten: list[list] = [[], []]  # the assumptions ended, by the views and by the plain
    for k, view in enumerate([*views, *plains]):
        view.on_forget = lambda pod, at, _k=k: forgotten[_k // 2].append((_k % 2, pod.index, at))
    pods = [Pod(i, None, f"p{i}", (100 * (i % 3), i % 2 * (i + 1), 50 * (i % 2)), 0, -1, None,
                None, 0) for i in range(5)]  # (some without a cpu or a memory request)
    last = [[0, 0, 0], [0, 0, 0]]  # per view and informer: the last applied time handed over
    held: list[list[Write]] = [[], []]
    rv = 0
    for _ in range(data.draw(st.integers(1, 60))):
        action = data.draw(st.sampled_from(["write", "write", "release", "advance", "assume",
                                            "forget", "read"]))
        if action == "write":
            rv += 1
            write = _write(data, rv, now[0], nodes, pods)
            informer = 0 if write.kind in NODE_KINDS else 2 if write.kind == WriteKind.OTHER else 1
            applied = []
            for k in range(2):
                last[k][informer] = max(last[k][informer], now[0]) + data.draw(st.integers(0, 4))
                applied.append(last[k][informer])
            how = data.draw(st.sampled_from(["both", "each", "held"]))
            if how == "both":
                inboxes.push(np.array([v._index for v in views], dtype=np.int64),
                             np.array([0, 1], dtype=np.int64), np.array(applied, dtype=np.int64),
                             write)
            for k in range(2):
                if how == "held" and data.draw(st.booleans()):
                    views[k]._expect(write)
                    plains[k]._expect(write)
                    held[k].append(write)
                    continue
                if how != "both":
                    views[k]._deliver(applied[k], write)
                plains[k]._deliver(applied[k], write)
        elif action == "release":
            k = data.draw(st.integers(0, 1))
            if held[k]:
                write = held[k].pop(data.draw(st.integers(0, len(held[k]) - 1)))
                informer = 0 if write.kind in NODE_KINDS else 2 if write.kind == WriteKind.OTHER \
                    else 1
                last[k][informer] = max(last[k][informer], now[0]) + data.draw(st.integers(0, 4))
                views[k]._deliver(last[k][informer], write, True)
                plains[k]._deliver(last[k][informer], write, True)
        elif action == "advance":
            now[0] += data.draw(st.integers(0, 6))
        elif action in ("assume", "forget"):
            k, pod = data.draw(st.integers(0, 1)), data.draw(st.sampled_from(pods))
            if action == "assume":
                node = data.draw(st.integers(0, nodes - 1))
                views[k].assume(pod, node)
                plains[k].assume(pod, node)
            else:
                views[k].forget(pod)
                plains[k].forget(pod)
        else:
            kinds = data.draw(st.sets(st.sampled_from(list(WriteKind))))
            for view, plain in zip(views, plains):
                assert _read(view, pods, kinds) == _read(plain, pods, kinds)
        assert forgotten[0] == forgotten[1]


def _write(data, rv: int, now: int, nodes: int, pods: list[Pod]) -> Write:
    """A write of any kind, as the truth stamps it (a node version only on a node's write)."""
    kind = data.draw(st.sampled_from(list(WriteKind)))
    pod = None if kind in NODE_KINDS or kind == WriteKind.OTHER else data.draw(
        st.sampled_from(pods))
    node = data.draw(st.integers(0, nodes - 1)) if kind in NODE_KINDS or kind in (
        WriteKind.POD_BIND, WriteKind.POD_ASSUME) else NO_NODE
    if kind == WriteKind.POD_CREATE and data.draw(st.booleans()):  # listed on its node
        node = data.draw(st.integers(0, nodes - 1))
    alloc = ((*(data.draw(st.integers(0, 2000)) for _ in range(3)), data.draw(st.integers(0, 3)))
             if kind == WriteKind.NODE_SET else None)
    version = data.draw(st.integers(0, rv)) if node != NO_NODE else 0
    return Write(rv, now, kind, pod, node, "t", 0, -1, 200, alloc, version)


def _read(view, pods: list[Pod], kinds) -> tuple:
    snapshot = view.snapshot()
    return (snapshot.alloc.tolist(), snapshot.free.tolist(), snapshot.present.tolist(),
            snapshot.version.tolist(), snapshot.zero_requests.tolist(), view.give_backs, view.oldest_unapplied(),
            view.next_due(kinds), [view.has_placed(p) for p in pods],
            [view.assumes(p) for p in pods])


def test_a_view_that_reads_rarely_lengthens_only_its_own_row():
    """The inboxes' segments: one view's deliveries piling up unread (a scheduler with no pods
    to place) lengthen its own pods' row, not every view's."""
    inboxes, now = Inboxes(), [0]
    busy, idle = (View(1, lambda: now[0], True, inboxes) for _ in range(2))
    pod = Pod(0, None, "p0", (1, 1, 0), 0, -1, None, None, 0)
    for rv in range(1, 10 * Inboxes.ROOM):
        write = Write(rv, rv, WriteKind.POD_CREATE, pod, NO_NODE, "t", 0, -1, 201)
        inboxes.push(np.array([busy._index, idle._index], dtype=np.int64),
                     np.array([0, 1], dtype=np.int64), np.array([rv, rv], dtype=np.int64), write)
        now[0] = rv
        busy.snapshot()
    # six rows (two views, three informers) of ROOM entries, but the idle view's pods' row of 16
    assert inboxes.entries.size == (5 + 16) * Inboxes.ROOM * FIELDS
    waiting = inboxes.ends[4, 1] - inboxes.ends[4, 0]
    assert waiting == 10 * Inboxes.ROOM - 1 and idle.oldest_unapplied() is None  # (applied now)


def test_only_a_replay_with_views_loads_their_kernels(tmp_path):
    """``viewkernel``'s kernels are loaded when the first views' inboxes are made: an observe
    replay, which has none, does not load them (0.15 s of its start), and a what-if replay
    does.  In a process of its own: this one may have loaded them already."""
    trace = tmp_path / "small.parquet"
    synthesize(SynthSpec(nodes=10, pods=200, bind="least-allocated"), trace)
    script = f"""
from replay.api import run_replay
from replay.engine import viewkernel
from replay.engine.config import load_config
run_replay({str(trace)!r}, load_config(None, model="observe"), out={str(tmp_path / "o")!r})
print(viewkernel.compiled.cache_info().currsize)
run_replay({str(trace)!r}, load_config(None, model="oracle"), out={str(tmp_path / "w")!r})
print(viewkernel.compiled.cache_info().currsize)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1"]
