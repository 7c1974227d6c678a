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
--
-- The delays are counted (a role has tens of thousands of distinct delays in whole microseconds
-- against millions of deliveries) and each fraction's two neighbours found by their running
-- counts, rather than selected by quantile_cont among every delivery once per fraction; the
-- interpolation between them is quantile_cont's own, bit for bit (quantile_place and
-- quantile_at in views.sql).
WITH delays AS (
    SELECT run, watcher_role, end_to_end AS us, count(*) AS deliveries
    FROM delivery_delays_us
    WHERE in_time_window(commit_ts) AND watcher_selected(watcher)
    GROUP BY run, watcher_role, end_to_end
), ranked AS (
    -- rank_end: how many of the role's deliveries are delayed by at most us
    SELECT run, watcher_role, us,
           sum(deliveries) OVER (PARTITION BY run, watcher_role ORDER BY us) AS rank_end
    FROM delays
    WHERE us IS NOT NULL
), roles AS (
    SELECT run, watcher_role, sum(deliveries)::BIGINT AS events,
           sum(deliveries) FILTER (us IS NOT NULL) AS measured
    FROM delays
    GROUP BY run, watcher_role
), points AS (
    SELECT run, watcher_role, events, fraction, quantile_place(measured, fraction) AS place
    FROM (SELECT *, unnest(cdf_fractions()) AS fraction FROM roles)
)
SELECT p.run, p.watcher_role, p.fraction,
       quantile_at(lo.us / 1000.0, hi.us / 1000.0, p.place) AS delay_ms, p.events
FROM points AS p
ASOF LEFT JOIN ranked AS lo
    ON lo.run = p.run AND lo.watcher_role = p.watcher_role AND lo.rank_end > p.place.below
ASOF LEFT JOIN ranked AS hi
    ON hi.run = p.run AND hi.watcher_role = p.watcher_role AND hi.rank_end > p.place.above
ORDER BY p.run, p.watcher_role, p.fraction;
