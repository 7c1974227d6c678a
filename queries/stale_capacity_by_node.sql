-- stale_capacity_by_node: on which nodes and when the views were blind to free capacity: the 20
-- nodes with the most blind core-seconds, minute by minute (a node x time heat map).
--
-- Blind core-seconds are summed over every watcher with a view of capacity (each scheduler and
-- the binder see every node, a kubelet only its own); a window counts in the minute (UTC) in
-- which it starts, whole, as in stale_capacity_timeline.sql.
--
-- One row per run, node (the run's 20 nodes with the most blind core-seconds; fewer if fewer
-- nodes had any) and minute of the run (from the minute of its first timestamp to that of its
-- last, within from_ts and to_ts), windows or not:
--   run                  the run directory's name
--   node                 the node
--   rank                 1 for the node with the most blind core-seconds in the run, 2 for the
--                        next, ... (ties: by name)
--   minute               the minute in which the windows started
--   windows              stale windows of any resource on the node, all watchers
--   blind_core_seconds   cpu shortfall integrated over the stale cpu windows, core-seconds
--   wasted_core_seconds  the same over the wasted ones (a pending pod fit the truth, not the view)
--
-- Parameters: from_ts, to_ts select windows by start_ts; watcher selects watchers by name.
WITH windows AS (
    SELECT run, node, minute_of(start_ts) AS minute, resource, gap_seconds, wasted
    FROM capacity_windows
    WHERE kind = 'stale' AND in_time_window(start_ts) AND watcher_selected(watcher)
), ranked AS (
    SELECT run, node,
           row_number() OVER (PARTITION BY run
                              ORDER BY core_seconds(gap_seconds, resource = 'cpu') DESC, node)
               AS rank
    FROM windows
    GROUP BY run, node
    HAVING core_seconds(gap_seconds, resource = 'cpu') > 0
    QUALIFY rank <= 20
)
SELECT run, node, rank, minute,
       count(resource) AS windows,
       core_seconds(gap_seconds, resource = 'cpu') AS blind_core_seconds,
       core_seconds(gap_seconds, resource = 'cpu' AND wasted) AS wasted_core_seconds
FROM ranked
JOIN run_minutes USING (run)
LEFT JOIN windows USING (run, node, minute)
GROUP BY ALL
ORDER BY run, rank, minute;
