"""Parameter sweeps: many replays of the same traces under a matrix of models, parameters,
config keys and seeds, on this machine's processes or on a Ray cluster.

    from replay.sweep import LocalExecutor, load_sweep, run_sweep
    sweep = load_sweep("sweep.toml")
    report = run_sweep(sweep, "sweeps/study", LocalExecutor(jobs=2, memory_bytes=None))

``spec`` reads the sweep file and expands it into points; ``driver`` runs them through an
executor (``local`` or ``distributed``, for Ray) and keeps ``sweep.parquet`` (``index``) up to
date; each point runs ``point.run_point``, exactly what ``replay run`` does.  docs/sweeps.md.
"""

from replay.sweep.distributed import RayExecutor
from replay.sweep.driver import Executor, Plan, Report, plan, run_sweep
from replay.sweep.index import Outcome, Status
from replay.sweep.local import LocalExecutor
from replay.sweep.memory import budget_bytes
from replay.sweep.spec import Point, Sweep, load_sweep

__all__ = ["Executor", "LocalExecutor", "Outcome", "Plan", "Point", "RayExecutor", "Report",
           "Status", "Sweep", "budget_bytes", "load_sweep", "plan", "run_sweep"]
