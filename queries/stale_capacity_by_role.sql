-- stale_capacity_by_role: stale_capacity_summary.sql short enough for a terminal: per watcher
-- role, the watchers that see every node one by one, only the worst few of those that see one
-- node each (a kubelet per node), and the role as a whole.
--
-- One row per run, watcher_role and watcher, where watcher is
--   * each watcher of the role that sees every node (a scheduler, the binder);
--   * of the watchers that see one node each (kubelets), the 3 with the most blind core-seconds
--     (ties: by name): the worst nodes;
--   * ALL: every watcher of the role together, for a role of more than one watcher.
-- Rows are ordered by run and role; in a role, watchers by name, then the worst nodes (worst
-- first), then ALL.  Columns:
--   run              the run directory's name
--   watcher_role     scheduler, binder, kubelet, ...
--   watcher          the watcher, or ALL
--   watchers         how many watchers the row sums: 1, or the role's number for ALL
--   windows, p50_ms, p99_ms, max_ms, blind_core_seconds, wasted_core_seconds, phantom_windows,
--   phantom_p50_ms, phantom_p99_ms, phantom_max_ms, phantom_core_seconds,
--   conflicted_core_seconds
--                    as in stale_capacity_summary.sql, over the windows of the row's watchers
--                    (for ALL, the percentiles are those of every window of the role)
-- Every watcher's row: `replay query RUN stale_capacity_summary`.
--
-- Parameters: from_ts, to_ts select windows by start_ts; watcher selects watchers by name.
WITH summaries AS (
    FROM capacity_summary(NULL)
), each_watcher AS (
    SELECT * EXCLUDE (per_role),
           row_number() OVER (PARTITION BY run, watcher_role, one_node
                              ORDER BY blind_core_seconds DESC, watcher) AS worst
    FROM summaries
    WHERE NOT per_role
), per_role AS (
    SELECT * EXCLUDE (per_role) FROM summaries WHERE per_role
), shown AS (
    SELECT * REPLACE (CASE WHEN one_node THEN worst ELSE 0 END AS worst),
           CASE WHEN one_node THEN 1 ELSE 0 END AS place
    FROM each_watcher
    WHERE NOT one_node OR worst <= 3
    UNION ALL
    SELECT *, 0 AS worst, 2 AS place
    FROM per_role
    WHERE watchers > 1
)
SELECT run, watcher_role, watcher, watchers, windows, p50_ms, p99_ms, max_ms,
       blind_core_seconds, wasted_core_seconds, phantom_windows, phantom_p50_ms, phantom_p99_ms,
       phantom_max_ms, phantom_core_seconds, conflicted_core_seconds
FROM shown
ORDER BY run, watcher_role, place, worst, watcher;
