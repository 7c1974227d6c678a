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
WITH per_role AS (
    SELECT run, watcher_role, count(*) AS events,
           [delay_stats(storage_to_cache), delay_stats(cacher_queue), delay_stats(watcher_queue),
            delay_stats(network), delay_stats(client_queue), delay_stats(handler),
            delay_stats(end_to_end)] AS stats
    FROM delivery_delays_us
    WHERE in_time_window(commit_ts) AND watcher_selected(watcher)
    GROUP BY run, watcher_role
), per_component AS (
    SELECT run, watcher_role, events, stats[7].mean_ms AS end_to_end_mean_ms,
           unnest(['storage_to_cache', 'cacher_queue', 'watcher_queue', 'network',
                   'client_queue', 'handler', 'end_to_end']) AS component,
           unnest(range(1, 8)) AS position,
           unnest(stats, recursive := true)
    FROM per_role
)
SELECT run, watcher_role, component, events, mean_ms,
       percentiles[1] AS p50_ms, percentiles[2] AS p90_ms, percentiles[3] AS p99_ms, max_ms,
       mean_ms / nullif(end_to_end_mean_ms, 0) AS share
FROM per_component
ORDER BY run, watcher_role, position;
