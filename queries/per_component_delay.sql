-- per_component_delay: how long each stage of the watch pipeline delays a write, by the role of
-- the watcher that receives it.
--
-- A delivery is one committed write reaching one watcher.  Its end-to-end delay, from the write's
-- commit in etcd to the watcher's informer handler having applied it, is the sum of six stages
-- (docs/run-directory.md): storage_to_cache (etcd to the API server's watch cache), cacher_queue
-- (the watch cache's dispatch loop), watcher_queue (the per-watcher buffer), network,
-- client_queue (waiting in the client's queue) and handler (applying the write).
--
-- One row per run, watcher_role and component (the six stages in pipeline order, then
-- end_to_end):
--   run            the run directory's name
--   watcher_role   scheduler, binder, dispatcher, kubelet or observer
--   component      the stage, or end_to_end
--   events         deliveries measured
--   mean_ms        mean delay, milliseconds
--   p50_ms, p90_ms, p99_ms
--                  percentiles, interpolated linearly between deliveries
--   max_ms         largest delay
--   share          mean_ms / the end_to_end mean_ms of the same role: the stage's part of the
--                  delay (null when the end-to-end mean is 0)
--
-- Parameters: from_ts, to_ts select deliveries by their write's commit_ts; watcher selects
-- watchers by name.
--
-- The numbers are delay_stats (views.sql) of each stage, bit for bit, computed as delay_cdf.sql
-- computes its points: each stage's delays are counted (a role has at most about a hundred
-- thousand distinct delays in whole microseconds against millions of deliveries), in one pass
-- over the deliveries with a grouping set per stage, and each percentile's two neighbours are
-- found by their running counts.  Selecting them with quantile_cont among every delivery, seven
-- times, took 1.5 times as long on the 27M deliveries of a 1M-pod what-if run, 1.2-1.3 times as
-- long on that run and a 1M-pod observe run together, and 5.5 times the memory (3.9 GB).  The
-- timeline (per_component_delay_timeline.sql) does not count: a minute's role has almost as many
-- distinct delays as deliveries, and counting them took 2.4 times as long.
WITH pairs AS (
    -- each run and watcher role as a number, for the deliveries to be counted by (numbers rather
    -- than two names made the counting 1.4 times as fast on two 1M-pod runs)
    SELECT run, role AS watcher_role, row_number() OVER (ORDER BY run, role) AS pair
    FROM (SELECT DISTINCT run, role FROM watchers)
), counted AS (
    -- deliveries per run and role, stage and delay; position is the stage's place in the
    -- pipeline (1 to 6, then 7 for end_to_end): the one grouping set its row belongs to
    SELECT pair,
           list_position([grouping(storage_to_cache), grouping(cacher_queue),
                          grouping(watcher_queue), grouping(network), grouping(client_queue),
                          grouping(handler), grouping(end_to_end)], 0) AS position,
           coalesce(storage_to_cache, cacher_queue, watcher_queue, network, client_queue, handler,
                    end_to_end) AS us,
           count(*) AS deliveries
    FROM delivery_delays_us
    JOIN pairs USING (run, watcher_role)
    WHERE in_time_window(commit_ts) AND watcher_selected(watcher)
    GROUP BY pair,
             GROUPING SETS ((storage_to_cache), (cacher_queue), (watcher_queue), (network),
                            (client_queue), (handler), (end_to_end))
), ranked AS (
    -- rank_end: how many of the stage's deliveries are delayed by at most us
    SELECT pair, position, us,
           sum(deliveries) OVER (PARTITION BY pair, position ORDER BY us) AS rank_end
    FROM counted
    WHERE us IS NOT NULL
), stages AS (
    -- the mean adds whole microseconds, as delay_stats does
    SELECT pair, position, sum(deliveries)::BIGINT AS events,
           sum(deliveries) FILTER (us IS NOT NULL) AS measured,
           sum(us::HUGEINT * deliveries) / measured / 1000 AS mean_ms,
           max(us) / 1000.0 AS max_ms
    FROM counted
    GROUP BY pair, position
), points AS (
    SELECT *, quantile_place(measured, fraction) AS place
    FROM (SELECT *, unnest([0.5, 0.9, 0.99]) AS fraction FROM stages)
), percentiles AS (
    SELECT p.pair, p.position, p.events, p.mean_ms, p.max_ms,
           list(quantile_at(lo.us / 1000.0, hi.us / 1000.0, p.place) ORDER BY p.fraction)
               AS percentiles
    FROM points AS p
    ASOF LEFT JOIN ranked AS lo
        ON lo.pair = p.pair AND lo.position = p.position AND lo.rank_end > p.place.below
    ASOF LEFT JOIN ranked AS hi
        ON hi.pair = p.pair AND hi.position = p.position AND hi.rank_end > p.place.above
    GROUP BY ALL
)
SELECT run, watcher_role,
       ['storage_to_cache', 'cacher_queue', 'watcher_queue', 'network', 'client_queue', 'handler',
        'end_to_end'][position] AS component,
       events, mean_ms,
       percentiles[1] AS p50_ms, percentiles[2] AS p90_ms, percentiles[3] AS p99_ms, max_ms,
       mean_ms / nullif(any_value(mean_ms) FILTER (position = 7) OVER (PARTITION BY pair), 0)
           AS share
FROM percentiles
JOIN pairs USING (pair)
ORDER BY run, watcher_role, position;
