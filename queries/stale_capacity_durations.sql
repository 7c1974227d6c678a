-- stale_capacity_durations: how long the stale and phantom windows last, per watcher role: a
-- histogram of their durations, in buckets 1-2-5 apart (an axis of durations is best read on a
-- log scale: most windows last about one watch delay, a few last as long as a missed write).
--
-- One row per run, watcher_role, kind and bucket holding at least one window:
--   run              the run directory's name
--   watcher_role     scheduler, binder, kubelet, ...
--   kind             stale (the view shows less free capacity than there is) or phantom (more)
--   duration_from_ms the bucket's lower bound, milliseconds: 0, then 0.01, 0.02, 0.05, 0.1, 0.2,
--                    0.5, 1, ... up to 10,000,000 (about 2.8 hours)
--   duration_to_ms   its upper bound, excluded (null: no bound)
--   windows          windows of any resource whose duration falls in the bucket
--   share            windows / all windows of the run, role and kind
--
-- Parameters: from_ts, to_ts select windows by start_ts; watcher selects watchers by name.
WITH edges AS (
    SELECT [0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000,
            2000, 5000, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7]::DOUBLE[] AS from_ms
), buckets AS (
    SELECT unnest(from_ms) AS duration_from_ms,
           unnest(from_ms[2:] || ['infinity'::DOUBLE]) AS duration_to_ms
    FROM edges
), windows AS (
    SELECT run, watchers.role AS watcher_role, kind, ms_between(start_ts, end_ts) AS duration_ms
    FROM capacity_windows
    JOIN watchers USING (run, watcher)
    WHERE in_time_window(start_ts) AND watcher_selected(watcher)
), counted AS (
    SELECT run, watcher_role, kind, duration_from_ms, duration_to_ms, count(*) AS windows
    FROM windows
    JOIN buckets
      ON duration_ms >= duration_from_ms AND duration_ms < duration_to_ms
    GROUP BY ALL
)
SELECT run, watcher_role, kind, duration_from_ms,
       nullif(duration_to_ms, 'infinity'::DOUBLE) AS duration_to_ms, windows,
       windows / sum(windows) OVER (PARTITION BY run, watcher_role, kind) AS share
FROM counted
ORDER BY run, watcher_role, kind DESC, duration_from_ms;
