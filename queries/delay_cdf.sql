-- delay_cdf: the distribution of the end-to-end watch delay for each watcher role, as points of
-- its cumulative distribution function (to draw it, e.g. on a log axis, or to read any quantile
-- without the deliveries).
--
-- One row per run, watcher_role and fraction: 0, 0.01, 0.02, ..., 0.99, then 0.991, ..., 0.999,
-- 0.9999 and 1 (the tail, where the delay a few writes suffer is decided; cdf_fractions() in
-- views.sql):
--   run            the run directory's name
--   watcher_role   scheduler, binder, dispatcher, kubelet or observer
--   fraction       the share of the role's deliveries delayed by at most delay_ms
--   delay_ms       the end-to-end delay (commit in etcd to the handler having applied the write)
--                  at that fraction, interpolated linearly between deliveries as in
--                  per_component_delay.sql: fraction 0 is the smallest delay, 1 the largest
--   events         the role's deliveries
--
-- Parameters: from_ts, to_ts select deliveries by their write's commit_ts; watcher selects
-- watchers by name.
WITH per_role AS (
    SELECT run, watcher_role, count(*) AS events,
           quantile_cont(end_to_end, cdf_fractions()) AS delays
    FROM delivery_delays
    WHERE in_time_window(commit_ts) AND watcher_selected(watcher)
    GROUP BY run, watcher_role
)
SELECT run, watcher_role, unnest(cdf_fractions()) AS fraction, unnest(delays) AS delay_ms, events
FROM per_role
ORDER BY run, watcher_role, fraction;
