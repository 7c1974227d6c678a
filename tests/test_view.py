"""A view's capacity as its own placements change it (``assume``, ``forget``, ``holding``): the
snapshot the schedulers read must see every change made through the view's rows."""

from __future__ import annotations

from replay.engine.cluster import Pod
from replay.engine.view import View

GIB = 1 << 30


def test_own_placements_change_the_snapshot_and_fits():
    view = View(2, lambda: 0)
    view._set_node(0, (4000, 8 * GIB, 1000))
    pod = Pod(0, None, "p0", (1500, 2 * GIB, 500), 0, -1, None, None, 0)
    free = view.snapshot().free
    view.assume(pod, 0)
    assert free[:, 0].tolist() == [2500, 6 * GIB, 500]
    assert view.fits(0, (2500, 6 * GIB, 500)) and not view.fits(0, (2501, 0, 0))
    with view.holding() as hold:
        hold(0, (1000, GIB, 0))
        assert free[:, 0].tolist() == [1500, 5 * GIB, 500]
    assert free[:, 0].tolist() == [2500, 6 * GIB, 500]
    view.forget(pod)
    assert free[:, 0].tolist() == [4000, 8 * GIB, 1000]
    assert free[:, 1].tolist() == [0, 0, 0]
