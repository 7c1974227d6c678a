-- per_component_delay_timeline: per_component_delay minute by minute, to show the delay of each
-- stage growing (or not) with the load.
--
-- One row per run, minute (or bucket of bucket_minutes minutes), watcher_role and component (the six stages of the watch pipeline in
-- order, then end_to_end; see per_component_delay.sql):
--   run            the run directory's name
--   minute         the minute (UTC) in which the delivered writes were committed; with
--                  bucket_minutes, the first minute of the bucket (views.sql: bucket_of)
--   watcher_role   scheduler, binder, dispatcher, kubelet or observer
--   component      the stage, or end_to_end
--   events         deliveries of writes committed in that minute (bucket)
--   mean_ms        mean delay, milliseconds
--   p50_ms, p90_ms, p99_ms
--                  percentiles, interpolated linearly between deliveries
--   max_ms         largest delay
--   share          mean_ms / the end_to_end mean_ms of the same minute and role (null when that
--                  is 0)
--
-- Parameters: from_ts, to_ts select deliveries by their write's commit_ts; watcher selects
-- watchers by name; bucket_minutes sets the rows' width.
WITH per_minute AS (
    -- grouped by the minute as an integer (views.sql: bucket_us), made a timestamp per group
    -- below: converting every delivery's minute took an eighth of this query's time
    SELECT run, bucket_us(commit_ts) AS minute_us, watcher_role, count(*) AS events,
           [delay_stats(storage_to_cache), delay_stats(cacher_queue), delay_stats(watcher_queue),
            delay_stats(network), delay_stats(client_queue), delay_stats(handler),
            delay_stats(end_to_end)] AS stats
    FROM delivery_delays_us
    WHERE in_time_window(commit_ts) AND watcher_selected(watcher)
    GROUP BY run, minute_us, watcher_role
), per_component AS (
    SELECT run, make_timestamptz(minute_us) AS minute, watcher_role, events,
           stats[7].mean_ms AS end_to_end_mean_ms,
           unnest(['storage_to_cache', 'cacher_queue', 'watcher_queue', 'network',
                   'client_queue', 'handler', 'end_to_end']) AS component,
           unnest(range(1, 8)) AS position,
           unnest(stats, recursive := true)
    FROM per_minute
)
SELECT run, minute, watcher_role, component, events, mean_ms,
       percentiles[1] AS p50_ms, percentiles[2] AS p90_ms, percentiles[3] AS p99_ms, max_ms,
       mean_ms / nullif(end_to_end_mean_ms, 0) AS share
FROM per_component
ORDER BY run, minute, watcher_role, position;
