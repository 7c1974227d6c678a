-- stale_capacity_summary: per watcher, how often and how long its view of free capacity was
-- below the truth (stale) and above it (phantom), and what that cost.
--
-- Summarises stale_capacity_windows.sql and phantom_capacity_windows.sql over every window of
-- the watcher, of every node and resource (cpu, memory, gpu).
--
-- One row per run and watcher with a view of capacity (it watches pods and nodes), windows or
-- not:
--   run                      the run directory's name
--   watcher                  the watcher
--   windows                  stale windows
--   p50_ms, p99_ms, max_ms   their durations: percentiles (interpolated linearly) and maximum,
--                            milliseconds (null without windows)
--   blind_core_seconds       cpu shortfall integrated over the stale cpu windows, core-seconds
--   wasted_core_seconds      the same over the stale cpu windows that were wasted (a pending pod
--                            fit the truth but not the view)
--   phantom_windows          phantom windows
--   phantom_p50_ms, phantom_p99_ms, phantom_max_ms
--                            their durations, as above
--   phantom_core_seconds     cpu excess integrated over the phantom cpu windows, core-seconds
--   conflicted_core_seconds  the same over the phantom cpu windows during which the watcher, as
--                            a scheduler, decided an attempt on the node that ended in conflict
--
-- Parameters: from_ts, to_ts select windows by start_ts; watcher selects watchers by name.
WITH windows AS (
    SELECT *, ms_between(start_ts, end_ts) AS duration_ms
    FROM capacity_windows
    WHERE in_time_window(start_ts) AND watcher_selected(watcher)
), per_watcher AS (
    SELECT run, watcher,
           count(*) FILTER (kind = 'stale') AS windows,
           quantile_cont(duration_ms, [0.5, 0.99]) FILTER (kind = 'stale') AS durations,
           max(duration_ms) FILTER (kind = 'stale') AS max_ms,
           sum(gap_seconds) FILTER (kind = 'stale' AND resource = 'cpu') AS blind_core_seconds,
           sum(gap_seconds) FILTER (kind = 'stale' AND resource = 'cpu' AND wasted)
               AS wasted_core_seconds,
           count(*) FILTER (kind = 'phantom') AS phantom_windows,
           quantile_cont(duration_ms, [0.5, 0.99]) FILTER (kind = 'phantom') AS phantom_durations,
           max(duration_ms) FILTER (kind = 'phantom') AS phantom_max_ms,
           sum(gap_seconds) FILTER (kind = 'phantom' AND resource = 'cpu') AS phantom_core_seconds,
           sum(gap_seconds) FILTER (kind = 'phantom' AND resource = 'cpu' AND conflicts > 0)
               AS conflicted_core_seconds
    FROM windows
    GROUP BY run, watcher
)
SELECT viewers.run, viewers.watcher,
       coalesce(windows, 0) AS windows,
       durations[1] AS p50_ms, durations[2] AS p99_ms, max_ms,
       coalesce(blind_core_seconds, 0) AS blind_core_seconds,
       coalesce(wasted_core_seconds, 0) AS wasted_core_seconds,
       coalesce(phantom_windows, 0) AS phantom_windows,
       phantom_durations[1] AS phantom_p50_ms, phantom_durations[2] AS phantom_p99_ms,
       phantom_max_ms,
       coalesce(phantom_core_seconds, 0) AS phantom_core_seconds,
       coalesce(conflicted_core_seconds, 0) AS conflicted_core_seconds
FROM capacity_viewers AS viewers
LEFT JOIN per_watcher USING (run, watcher)
WHERE watcher_selected(viewers.watcher)
ORDER BY run, watcher;
