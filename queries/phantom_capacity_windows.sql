-- phantom_capacity_windows: when, where and for how long each watcher saw free capacity that
-- another write had already taken: the cause of conflicts.
--
-- The mirror image of stale_capacity_windows.sql: a window is a maximal interval during which a
-- watcher's view of one node's free capacity of one resource is above the truth.  The exact
-- rules are in the header of derived/capacity_windows.sql.
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
--   phantom_max      the largest excess (the view's free capacity minus the truth's), in cores,
--                    GiB or GPUs
--   phantom_integral the excess integrated over the window: core-seconds, GiB-seconds or
--                    GPU-seconds
--   conflicts        attempts of this watcher (as a scheduler) on this node, decided during the
--                    window, that ended in conflict
--
-- Parameters: from_ts, to_ts select windows by start_ts; watcher selects watchers by name.
SELECT run, watcher, node, resource, start_ts, end_ts,
       ms_between(start_ts, end_ts) AS duration_ms,
       gap_max AS phantom_max,
       gap_seconds AS phantom_integral,
       conflicts
FROM stored_rows('capacity_windows')
WHERE kind = 'phantom' AND in_time_window(start_ts) AND watcher_selected(watcher)
-- in order of run, watcher, node, resource and start_ts: as stored (views.sql, stored_rows)
