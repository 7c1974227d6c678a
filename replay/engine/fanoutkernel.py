"""A write's fan-out to its watches, compiled with numba: the common case of ``_Engine.step``.

Per write the what-if engine decides whether the dispatcher blocks (a target watch is full),
when it is released, and for each target watch in the common case (connected, a fifo client
queue, nothing held, room in its result channel) when the event is sent, received, dequeued and
applied.  In Python that was about 10 µs a write for 5.4 targets (a fifth of a Gödel replay's
event loop); here it is one call over the streams' state (``pipeline._Engine.state``, a row per
stream, and ``ring``, the recent sent times) and their draws, the same integer recursions as
``_Watch.enter``.  A target not in the common case is left to ``_Watch`` (``done`` 0), which
reads and writes the same state once the stream is handed to it (``_Watch.to_python``).
``unblock`` turns the fan-out's answers, as the delivery log keeps them (a block a write), back
into the log's columns.  Imported only by the what-if engine (numba's import takes half a second), compiled once per
machine (``cache=True``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from replay.engine.streamstate import (BASE, BLOCKS, BUFFER, CONNECTED, COUNT, CURSOR,
                                       EARLIEST, FIFO_LAST, FRONT, HEAD, KERNEL, LAST_RV, LIVE,
                                       RECEIVED, REFILL, ROOM, ROW, SENT)
from replay.jit import compiled_entry

Ints = npt.NDArray[np.int64]


def _fan_out(state: Ints, ring: Ints, queue: Ints, network: Ints, handler: Ints, streams: Ints,
             rv: int, start: int, cacher: int, per_watcher: int, out: Ints) -> tuple[int, int]:
    """Write ``rv``, its dispatcher free from ``start``, to the watches ``streams``: returns
    when it is dispatched and how many targets it was delivered to here (their sent, received,
    dequeued and applied times in ``out``'s first four rows, ``out[4]`` 1 for them, 0 for those
    left to Python, ``out[5]`` the rv: the rows are the delivery log's columns); or BLOCKS (a
    target is full: nothing changed, ``_blocking_step``), or REFILL (a target's row of draws is
    used up: nothing changed, refill it and call again)."""
    live, front, refill = 0, EARLIEST, False
    for s in streams:
        if state[s, CONNECTED]:
            live += 1
            front = max(front, state[s, FRONT])
        refill |= state[s, KERNEL] == 1 and state[s, CURSOR] == ROW
    dispatched = start + cacher + per_watcher * live
    if front > dispatched:
        return dispatched, BLOCKS
    if refill:
        return dispatched, REFILL
    done = 0
    for j in range(len(streams)):
        row = state[streams[j]]
        out[4, j] = 0
        if not row[KERNEL]:
            continue
        base, room, count, head, buffer = (row[BASE], row[ROOM], row[COUNT], row[HEAD],
                                           row[BUFFER])
        if count > buffer and ring[base + (head + count - buffer - 1) % room] > dispatched:
            continue  # it would be held: an earlier event has yet to reach the result channel
        # _Watch.enter of a live event (to a fifo client queue: _Watch.deliver)
        cursor = row[CURSOR]
        row[CURSOR] = cursor + 1
        sent = queue[streams[j], cursor] + max(dispatched, row[SENT])
        received = max(sent + network[streams[j], cursor], row[RECEIVED])
        row[SENT], row[RECEIVED] = sent, received
        if count < room:
            ring[base + count] = sent  # (head is 0 until the ring is full)
            row[COUNT] = count = count + 1
        else:
            ring[base + head] = sent
            row[HEAD] = head = (head + 1) % room
        row[LIVE] += 1
        if count == room and row[LIVE] >= buffer:
            row[FRONT] = ring[base + head]
        row[LAST_RV] = rv
        dequeued = max(received, row[FIFO_LAST])
        row[FIFO_LAST] = applied = dequeued + handler[streams[j], cursor]
        out[0, j], out[1, j], out[2, j], out[3, j], out[4, j], out[5, j] = (
            sent, received, dequeued, applied, 1, rv)
        done += 1
    return dispatched, done


fan_out: Callable[[Ints, Ints, Ints, Ints, Ints, Ints, int, int, int, int, Ints],
                  tuple[int, int]] = compiled_entry(  # type: ignore[assignment]
    _fan_out, "UniTuple(int64, 2)(int64[:, ::1], int64[::1], int64[:, ::1], int64[:, ::1], "
              "int64[:, ::1], int64[::1], int64, int64, int64, int64, int64[:, ::1])")


def _unblock(blocks: Ints, sizes: Ints, out: Ints) -> None:
    """Deliveries logged as blocks (``simulation._Log``: per block of k deliveries, its six rows
    of k, the fan-out's ``out`` as it is) back as six columns in ``out``'s rows."""
    at = row = 0
    for k in sizes:
        for field in range(6):
            target = out[field]
            for i in range(k):  # (a slice's assignment took numba 2 s to compile)
                target[row + i] = blocks[at + i]
            at += k
        row += k


unblock: Callable[[Ints, Ints, Ints], None] = compiled_entry(  # type: ignore[assignment]
    _unblock, "void(int64[::1], int64[::1], int64[:, ::1])")
