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
SELECT run, watcher, windows, p50_ms, p99_ms, max_ms, blind_core_seconds, wasted_core_seconds,
       phantom_windows, phantom_p50_ms, phantom_p99_ms, phantom_max_ms, phantom_core_seconds,
       conflicted_core_seconds
FROM capacity_summary(false)
ORDER BY run, watcher;
