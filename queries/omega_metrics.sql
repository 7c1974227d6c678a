-- omega_metrics: Omega's scheduler metrics: transactions, how many failed, the conflict fraction
-- per transaction and how busy each scheduler was, as Omega's simulator defines them
-- (google/cluster-scheduler-simulator: OmegaSimulation.scala counts them,
-- src/main/python/graphing-scripts/generate-plots-from-protobuff.py divides them).
--
-- A transaction is a scheduling cycle that committed claims: the attempts a scheduler decided
-- together (attempts.cycle_id: the tasks of one job, the members of one gang, or one pod) of which
-- at least one ended bound or in conflict; a cycle that found room for none of its pods submits
-- no transaction.  A transaction failed if any of its claims conflicted (an incremental one keeps
-- the others).  Its think time runs from the cycle's start to its decision (t_job + t_task x
-- tasks in Omega's terms).  Any what-if model's attempts answer; observe runs have no cycles.
--
-- One row per run and scheduler, then one whose scheduler is 'ALL' (every scheduler of the run):
--   run                  the run directory's name
--   scheduler            the scheduler, or ALL
--   transactions         transactions committed
--   failed_transactions  transactions with at least one conflicting claim
--   conflict_fraction    failed / successful transactions: can exceed 1 (null without a
--                        successful transaction)
--   busyness             think time of its transactions / the run's duration (useful + wasted);
--                        ALL: the mean over the schedulers that made attempts
--   useful_busyness      the same, of successful transactions
--   wasted_busyness      the same, of failed transactions
--
-- The run's duration is from its first to its last timestamp (run_bounds), within [from_ts,
-- to_ts) if set.  Cycles that committed nothing count neither as useful nor as wasted, as in the
-- simulator.
--
-- Parameters: from_ts, to_ts select cycles by decided_ts; watcher selects schedulers by name.
WITH cycles AS (
    SELECT run, scheduler, cycle_id,
           any_value(epoch_us(decided_ts) - epoch_us(started_ts)) AS think_us,
           bool_or(outcome IN ('bound', 'conflict')) AS committed,
           bool_or(outcome = 'conflict') AS failed
    FROM attempts
    WHERE cycle_id IS NOT NULL AND decided_ts IS NOT NULL
      AND in_time_window(decided_ts) AND watcher_selected(scheduler)
    GROUP BY run, scheduler, cycle_id
), schedulers AS (
    SELECT run, count(DISTINCT scheduler) AS schedulers FROM cycles GROUP BY run
), durations AS (
    SELECT run,
           epoch_us(least(end_ts, coalesce(getvariable('to_ts')::TIMESTAMPTZ, end_ts)))
           - epoch_us(greatest(start_ts, coalesce(getvariable('from_ts')::TIMESTAMPTZ, start_ts)))
           AS duration_us
    FROM run_bounds
), counted AS (
    SELECT run, coalesce(scheduler, 'ALL') AS scheduler,
           count(*) FILTER (committed) AS transactions,
           count(*) FILTER (committed AND failed) AS failed_transactions,
           coalesce(sum(think_us) FILTER (committed AND NOT failed), 0) AS useful_us,
           coalesce(sum(think_us) FILTER (committed AND failed), 0) AS wasted_us
    FROM cycles
    GROUP BY GROUPING SETS ((run, scheduler), (run))
), busy AS (
    -- the time over which busyness is measured: the run's duration, times the schedulers for ALL
    SELECT counted.*,
           nullif(duration_us, 0)
           * CASE WHEN scheduler = 'ALL' THEN schedulers.schedulers ELSE 1 END AS over_us
    FROM counted
    JOIN durations USING (run)
    JOIN schedulers USING (run)
)
SELECT run, scheduler, transactions, failed_transactions,
       failed_transactions / nullif(transactions - failed_transactions, 0) AS conflict_fraction,
       (useful_us + wasted_us) / over_us AS busyness,
       useful_us / over_us AS useful_busyness,
       wasted_us / over_us AS wasted_busyness
FROM busy
ORDER BY run, scheduler = 'ALL', scheduler;
