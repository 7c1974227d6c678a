-- conflict_rate_by_lag: conflicts against how stale the scheduler's view was when it decided.
--
-- attempts.view_lag_ms is the age, at the decision, of the oldest write the scheduler watches that
-- was committed but not yet applied: 0 when its view was up to date.  Attempts are grouped by
-- that lag into buckets [0, 1), [1, 2), [2, 5), [5, 10), ... [5000, 10000) and [10000, ...) ms.
--
-- One row per run, scheduler (then 'ALL' for every scheduler) and lag bucket:
--   run                  the run directory's name
--   scheduler            the scheduler that made the attempts, or ALL
--   lag_from_ms          the bucket's lower bound (null: the scheduler is not a watcher, so its
--                        lag is unknown)
--   lag_to_ms            the bucket's upper bound, excluded (null: no bound)
--   attempts, bound, conflicts, unschedulable, conflict_rate, conflict_fraction
--                        as in conflict_rate.sql, for the attempts of the bucket
--
-- Parameters: from_ts, to_ts select attempts by decided_ts; watcher selects schedulers by name.
WITH buckets AS (
    SELECT lag_from_ms::DOUBLE AS lag_from_ms, lag_to_ms::DOUBLE AS lag_to_ms
    FROM (VALUES (0, 1), (1, 2), (2, 5), (5, 10), (10, 20), (20, 50), (50, 100), (100, 200),
                 (200, 500), (500, 1000), (1000, 2000), (2000, 5000), (5000, 10000), (10000, NULL)
         ) AS edges(lag_from_ms, lag_to_ms)
), bucketed AS (
    SELECT attempts.*, buckets.lag_from_ms, buckets.lag_to_ms
    FROM attempts
    LEFT JOIN buckets
      ON attempts.view_lag_ms >= buckets.lag_from_ms
     AND (attempts.view_lag_ms < buckets.lag_to_ms OR buckets.lag_to_ms IS NULL)
    WHERE in_time_window(decided_ts) AND watcher_selected(scheduler)
), counted AS (
    SELECT run, coalesce(scheduler, 'ALL') AS scheduler, lag_from_ms, lag_to_ms,
           count(*) AS attempts,
           count(*) FILTER (outcome = 'bound') AS bound,
           count(*) FILTER (outcome = 'conflict') AS conflicts,
           count(*) FILTER (outcome = 'unschedulable') AS unschedulable
    FROM bucketed
    GROUP BY GROUPING SETS ((run, scheduler, lag_from_ms, lag_to_ms), (run, lag_from_ms, lag_to_ms))
)
SELECT run, scheduler, lag_from_ms, lag_to_ms, attempts, bound, conflicts, unschedulable,
       conflicts / nullif(bound + conflicts, 0) AS conflict_rate,
       conflicts / nullif(bound, 0) AS conflict_fraction
FROM counted
ORDER BY run, scheduler = 'ALL', scheduler, lag_from_ms NULLS LAST;
