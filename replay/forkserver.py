"""What the fork server of ``replay sweep``'s local executor loads before it forks a point:
numba, started (``jit.initialize``), and the engine's kernels that load by signature (the views'
and the fan-out's, from numba's cache).

A point run in a fresh interpreter (``spawn``) paid numba's import and start again, 0.54 s of
the 0.83 s its code took to import, before its replay began; on the example sweep's 24 points
of the sample trace that was a quarter of the CPU the sweep used.  A what-if point then loaded
the views' kernels, 0.2 s more.  The fork server is a process of its own (``multiprocessing``'s
``forkserver``), started once for the sweep: a point forked from it begins with all of this
ready, and with none of the sweep process's own pages.  What the server holds is frozen
(``gc.freeze``): a point's full collections skip it, 0.02-0.04 s in all of a sample what-if
point's two instead of 0.14-0.16 s, and its pages stay shared with the server's.

Nothing imported here may leave a thread running: a process forked while another thread holds
a lock finds it held for ever.  numba, llvmlite and numpy leave none across a fork (OpenBLAS
stops its threads when the process forks); polars, pyarrow and DuckDB start threads of their
own (polars' and jemalloc's), so a point imports them after the fork.
"""

import gc

from replay import jit
from replay.engine import fanoutkernel, viewkernel  # noqa: F401  (the fan-out's load on import)

jit.initialize()
viewkernel.compiled()
gc.freeze()  # the full collections of a point (two a run) need not walk numba's 100k objects
