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
    -- the buckets' lower bounds in whole microseconds: a window's duration is a whole number of
    -- them, so that a bucket [from, to) holds the durations up to to - 1
    SELECT [0, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000,
            500000, 1000000, 2000000, 5000000, 10000000, 20000000, 50000000, 100000000,
            200000000, 500000000, 1000000000, 2000000000, 5000000000, 10000000000]::BIGINT[]
               AS from_us
), buckets AS (
    SELECT unnest(from_us) AS from_us, unnest(from_us[2:] || [NULL]) AS to_us
    FROM edges
), each_watcher AS (
    -- each watcher's windows of each kind counted per bucket by histogram(), whose buckets are
    -- given by their largest value (a duration above the last one is counted under the largest
    -- BIGINT; -1 takes any negative one, which no bucket holds).  Counting per watcher first and
    -- joining the counts to the watchers' roles, rather than every window, and counting by a
    -- lookup rather than a join of every window with the buckets, took a third of the CPU time
    -- on two 1M-pod runs (35M windows).
    SELECT run, watcher, kind,
           histogram(epoch_us(end_ts) - epoch_us(start_ts),
                     [-1, 9, 19, 49, 99, 199, 499, 999, 1999, 4999, 9999, 19999, 49999, 99999,
                      199999, 499999, 999999, 1999999, 4999999, 9999999, 19999999, 49999999,
                      99999999, 199999999, 499999999, 999999999, 1999999999, 4999999999,
                      9999999999]::BIGINT[]) AS counts
    FROM capacity_windows
    WHERE in_time_window(start_ts) AND watcher_selected(watcher)
    GROUP BY run, watcher, kind
), counted AS (
    SELECT run, watchers.role AS watcher_role, kind, bucket.key AS up_to_us,
           sum(bucket.value)::BIGINT AS windows
    FROM (SELECT run, watcher, kind, unnest(map_entries(counts)) AS bucket FROM each_watcher)
    JOIN watchers USING (run, watcher)
    WHERE bucket.key >= 0 AND bucket.value > 0
    GROUP BY ALL
)
SELECT run, watcher_role, kind, from_us / 1000.0 AS duration_from_ms,
       to_us / 1000.0 AS duration_to_ms, windows,
       windows / sum(windows) OVER (PARTITION BY run, watcher_role, kind) AS share
FROM counted
JOIN buckets ON up_to_us = coalesce(to_us - 1, 9223372036854775807)
ORDER BY run, watcher_role, kind DESC, duration_from_ms;
