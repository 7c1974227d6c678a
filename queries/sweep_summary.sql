-- sweep_summary: the headline numbers of every run, one row each, beside what a sweep set for it:
-- how conflicts, watch delay and blind capacity change from one point of a sweep to the next.
--
-- `replay query DIR sweep_summary` on a sweep's directory (`replay sweep`) reads every finished
-- point; any other runs can be summarised too, and several sweeps at once.
--
-- One row per run, ordered by sweep, model, the swept values and seed:
--   run                  the run directory's name (a sweep's point)
--   sweep                the directory of the sweep it is a point of (null for other runs)
--   model                the run's model
--   ...                  one column per key a sweep swept other than the model and the seed,
--                        named as in sweep.parquet (model_schedulers,
--                        stages_network_latency_p99_ms: the key, dots made underscores)
--   seed                 the run's seed
--   attempts             scheduling attempts
--   conflicts            attempts that ended in conflict
--   conflict_fraction    conflicts / bound attempts: Omega's conflict fraction (null without
--                        bound attempts)
--   end_to_end_p50_ms, end_to_end_p99_ms
--                        the end-to-end watch delay (a write's commit to a watcher's handler
--                        having applied it) per watcher role, percentiles interpolated linearly
--                        between deliveries, to the microsecond: a map from role to
--                        milliseconds
--   schedulers           watchers of role scheduler (those that place pods), whose capacity
--                        windows the next three columns add up
--   blind_core_seconds   cpu shortfall integrated over their stale cpu windows: capacity that
--                        was free while they could not see it, core-seconds
--   wasted_core_seconds  the same over the stale cpu windows that were wasted (a pending pod fit
--                        the truth but not the view)
--   phantom_windows      their phantom windows (any resource): a view showing capacity already
--                        taken, the windows in which conflicts happen
--
-- Parameters: from_ts, to_ts select attempts by decided_ts, deliveries by their write's
-- commit_ts and windows by start_ts; watcher selects watchers (for attempts, schedulers) by name.
WITH attempt_counts AS (
    SELECT run, count(*) AS attempts,
           count(*) FILTER (outcome = 'conflict') AS conflicts,
           count(*) FILTER (outcome = 'bound') AS bound
    FROM attempts
    WHERE in_time_window(decided_ts) AND watcher_selected(scheduler)
    GROUP BY run
), delay_by_role AS (
    SELECT run, watcher_role, quantile_cont(end_to_end, [0.5, 0.99]) AS percentiles
    FROM delivery_delays
    WHERE in_time_window(commit_ts) AND watcher_selected(watcher)
    GROUP BY run, watcher_role
), delays AS (
    SELECT run,
           map(list(watcher_role ORDER BY watcher_role),
               list(round(percentiles[1], 3) ORDER BY watcher_role)) AS end_to_end_p50_ms,
           map(list(watcher_role ORDER BY watcher_role),
               list(round(percentiles[2], 3) ORDER BY watcher_role)) AS end_to_end_p99_ms
    FROM delay_by_role
    GROUP BY run
), schedulers AS (
    SELECT run, watcher
    FROM watchers
    WHERE role = 'scheduler' AND watcher_selected(watcher)
), capacity AS (
    SELECT run,
           -- whole nano-core-seconds, summed as integers: the same whatever order the threads
           -- add them in (as core_seconds in views.sql), which a sum of doubles is not
           sum(core_ns(gap_seconds)) FILTER (kind = 'stale' AND resource = 'cpu')
               / 1e9 AS blind_core_seconds,
           sum(core_ns(gap_seconds)) FILTER (kind = 'stale' AND resource = 'cpu'
                                                         AND wasted) / 1e9 AS wasted_core_seconds,
           count(*) FILTER (kind = 'phantom') AS phantom_windows
    FROM capacity_windows
    JOIN schedulers USING (run, watcher)
    WHERE in_time_window(start_ts)
    GROUP BY run
)
SELECT points.run, points.sweep, runs.model, points.* EXCLUDE (run, sweep, swept), runs.seed,
       coalesce(attempts, 0) AS attempts,
       coalesce(conflicts, 0) AS conflicts,
       conflicts / nullif(bound, 0) AS conflict_fraction,
       end_to_end_p50_ms, end_to_end_p99_ms,
       (SELECT count(*) FROM schedulers WHERE schedulers.run = points.run) AS schedulers,
       coalesce(blind_core_seconds, 0) AS blind_core_seconds,
       coalesce(wasted_core_seconds, 0) AS wasted_core_seconds,
       coalesce(phantom_windows, 0) AS phantom_windows
FROM sweep_points AS points
JOIN runs USING (run)
LEFT JOIN attempt_counts USING (run)
LEFT JOIN delays USING (run)
LEFT JOIN capacity USING (run)
ORDER BY points.sweep, runs.model, points.swept, runs.seed, points.run;
