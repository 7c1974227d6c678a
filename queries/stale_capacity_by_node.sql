-- stale_capacity_by_node: on which nodes and when the views were blind to free capacity: the 20
-- nodes with the most blind core-seconds, minute by minute (a node x time heat map).
--
-- Blind core-seconds are summed over every watcher with a view of capacity (each scheduler and
-- the binder see every node, a kubelet only its own); a window counts in the minute (UTC) in
-- which it starts, whole, as in stale_capacity_timeline.sql.
--
-- One row per run, node (the run's 20 nodes with the most blind core-seconds; fewer if fewer
-- nodes had any) and minute of the run (from the minute of its first timestamp to that of its
-- last, within from_ts and to_ts; or bucket of bucket_minutes minutes), windows or not:
--   run                  the run directory's name
--   node                 the node
--   rank                 1 for the node with the most blind core-seconds in the run, 2 for the
--                        next, ... (ties: by name)
--   minute               the minute in which the windows started (with bucket_minutes, the
--                        first minute of their bucket: views.sql, bucket_of)
--   windows              stale windows of any resource on the node, all watchers
--   blind_core_seconds   cpu shortfall integrated over the stale cpu windows, core-seconds
--   wasted_core_seconds  the same over the wasted ones (a pending pod fit the truth, not the view)
--
-- Parameters: from_ts, to_ts select windows by start_ts; watcher selects watchers by name;
-- bucket_minutes sets the rows' width.
WITH minutes AS (
    -- each node's stale windows summed minute by minute, once: the ranking below adds these
    -- sums rather than every window again, and the 10M stale windows of a 1M-pod run are not
    -- kept for a second pass (keeping them cost a fifth of this query's CPU time).
    -- Core-seconds as whole nano-core-seconds (core_ns, as core_seconds adds them), so that a
    -- node's are the sum of its minutes' exactly
    SELECT run, node, bucket_of(start_ts) AS minute, count(*) AS windows,
           sum(core_ns(gap_seconds)) FILTER (resource = 'cpu') AS blind_core_ns,
           sum(core_ns(gap_seconds)) FILTER (resource = 'cpu' AND wasted)
               AS wasted_core_ns
    FROM capacity_windows
    WHERE kind = 'stale' AND in_time_window(start_ts) AND watcher_selected(watcher)
    GROUP BY run, node, minute
), ranked AS (
    SELECT run, node,
           row_number() OVER (PARTITION BY run
                              ORDER BY coalesce(sum(blind_core_ns), 0) / 1e9 DESC, node)
               AS rank
    FROM minutes
    GROUP BY run, node
    HAVING sum(blind_core_ns) > 0
    QUALIFY rank <= 20
)
SELECT run, node, rank, minute,
       coalesce(windows, 0) AS windows,
       coalesce(blind_core_ns, 0) / 1e9 AS blind_core_seconds,
       coalesce(wasted_core_ns, 0) / 1e9 AS wasted_core_seconds
FROM ranked
JOIN run_buckets USING (run)
LEFT JOIN minutes USING (run, node, minute)
ORDER BY run, rank, minute;
