-- conflict_rate: how often optimistic placements collide, per scheduler and for all schedulers.
--
-- Every scheduling attempt ends bound, conflict (its placement collided: another write took the
-- capacity first, the binder rejected it, the kubelet refused it, ...), unschedulable (no node
-- fitted in the scheduler's view) or error.
--
-- One row per run and scheduler, then one whose scheduler is 'ALL' (every attempt of the run):
--   run                  the run directory's name
--   scheduler            the scheduler that made the attempts, or ALL
--   attempts             scheduling attempts
--   bound                attempts whose placement held
--   conflicts            attempts that ended in conflict
--   unschedulable        attempts that found no node
--   conflict_rate        conflicts / (bound + conflicts): the share of placements that failed
--                        (null without placements)
--   conflict_fraction    conflicts / bound, per attempt; can exceed 1 (null without bound
--                        attempts).  Omega's conflict fraction counts transactions: omega_metrics
--   conflicts_by_reason  conflicts per reason (api_conflict, binder_reject, kubelet_admission,
--                        ...), a map from reason to count, empty without conflicts
--
-- Parameters: from_ts, to_ts select attempts by decided_ts; watcher selects schedulers by name.
WITH selected AS (
    SELECT *
    FROM attempts
    WHERE in_time_window(decided_ts) AND watcher_selected(scheduler)
), counted AS (
    SELECT run, coalesce(scheduler, 'ALL') AS scheduler,
           count(*) AS attempts,
           count(*) FILTER (outcome = 'bound') AS bound,
           count(*) FILTER (outcome = 'conflict') AS conflicts,
           count(*) FILTER (outcome = 'unschedulable') AS unschedulable,
           coalesce(histogram(reason) FILTER (outcome = 'conflict'),
                    MAP {}::MAP(VARCHAR, UBIGINT)) AS conflicts_by_reason
    FROM selected
    GROUP BY GROUPING SETS ((run, scheduler), (run))
)
SELECT run, scheduler, attempts, bound, conflicts, unschedulable,
       conflicts / nullif(bound + conflicts, 0) AS conflict_rate,
       conflicts / nullif(bound, 0) AS conflict_fraction,
       conflicts_by_reason
FROM counted
ORDER BY run, scheduler = 'ALL', scheduler;
