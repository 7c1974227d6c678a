-- stale_capacity_windows: when, where and for how long each watcher was blind to free capacity
-- that existed.
--
-- A node's free capacity is its allocatable minus the requests of the pods bound to it.  The
-- truth changes when a write commits; a watcher's view when the watcher applies that write, and
-- for a scheduler also when it assumes a pod of its own (and drops the assumption).  A window is
-- a maximal interval during which the view of one node's free capacity of one resource is below
-- the truth.  The exact rules (ties, own assumptions, watchers that miss writes) are in the
-- header of derived/capacity_windows.sql.
--
-- One row per window:
--   run              the run directory's name
--   watcher          the watcher; a kubelet sees only its own node, a watcher that does not
--                    watch both pods and nodes has no view of capacity
--   node             the node
--   resource         cpu, memory or gpu
--   start_ts, end_ts the window [start_ts, end_ts); a window still open at the end of the run
--                    ends at the run's last timestamp
--   duration_ms      end_ts - start_ts, milliseconds
--   blind_max        the largest shortfall (truth's free capacity minus the view's), in cores,
--                    GiB or GPUs
--   blind_integral   the shortfall integrated over the window: core-seconds, GiB-seconds or
--                    GPU-seconds
--   wasted           a pod was pending at some instant of the window (created, not yet bound
--                    nor deleted) whose request of the resource was more than the view's free
--                    capacity and at most the truth's: it fit the node, but not in this view
--
-- Parameters: from_ts, to_ts select windows by start_ts; watcher selects watchers by name.
SELECT run, watcher, node, resource, start_ts, end_ts,
       ms_between(start_ts, end_ts) AS duration_ms,
       gap_max AS blind_max,
       gap_seconds AS blind_integral,
       wasted
FROM stored_rows('capacity_windows')
WHERE kind = 'stale' AND in_time_window(start_ts) AND watcher_selected(watcher)
-- in order of run, watcher, node, resource and start_ts: as stored (views.sql, stored_rows)
