"""The state of every stream of the what-if engine (``pipeline._Engine.state``, a row each),
shared by the compiled fan-out (``fanoutkernel``) and ``pipeline._Watch``: its own module, so
that the kernel's module and the pipeline's both import it, and observe's imports no numba."""

EARLIEST = -(1 << 62)  # before any time
ROW = 128  # the engine keeps this many draws of every stream's per-event stages at once
# A stream's row: its last sent and received times, live events, front, last rv, its fifo
# client queue's last completion, its recent sent times (``_Engine.ring``: how many, the
# oldest's place, from ``BASE``, ``ROOM`` long), where in its row of draws it is, its buffer,
# whether it is connected, and whether the compiled fan-out has its turn (``KERNEL``: then the
# fields up to CURSOR are the stream's, else ``_Watch``'s attributes are; FRONT and CONNECTED
# are kept in both, for every write's check of whether the dispatcher blocks)
(SENT, RECEIVED, LIVE, FRONT, LAST_RV, FIFO_LAST, COUNT, HEAD, CURSOR, BASE, ROOM, BUFFER,
 CONNECTED, KERNEL) = range(14)
BLOCKS, REFILL = -1, -2  # the fan-out's answers besides a count: the dispatcher blocks; a row of
# draws is used up
