"""What the fork server of ``replay sweep``'s local executor loads before it forks a point:
numba, started (``jit.initialize``).

A point run in a fresh interpreter (``spawn``) paid numba's import and start again, 0.54 s of
the 0.83 s its code took to import, before its replay began; on the example sweep's 24 points
of the sample trace that was a quarter of the CPU the sweep used.  The fork server is a process
of its own (``multiprocessing``'s ``forkserver``), started once for the sweep: a point forked
from it begins with numba ready, and with none of the sweep process's own pages.

Nothing imported here may leave a thread running: a process forked while another thread holds
a lock finds it held for ever.  numba, llvmlite and numpy leave none across a fork (OpenBLAS
stops its threads when the process forks); polars, pyarrow and DuckDB start threads of their
own (polars' and jemalloc's), so a point imports them after the fork.
"""

from replay import jit

jit.initialize()
