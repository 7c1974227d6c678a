-- watch_health: how each watch (a watcher's watch of one resource) fared under load: how long the
-- API server's dispatcher waited on its full buffer, how often it was terminated, how it recovered
-- (re-watch or re-list) and how long its view was frozen meanwhile.
--
-- Reads dispatch_waits, watch_terminations and relists (docs/run-directory.md): a dispatcher
-- that finds a watch's buffer full waits for it, holding back every later write of the resource,
-- within a time budget; a watch still full when the budget is spent is terminated, and its client
-- re-watches from the watch cache's window, or re-lists if its version has left the window.
--
-- One row per run and watch (every resource each watcher watches), incidents or not:
--   run                        the run directory's name
--   resource, watcher          the watch
--   blocked_waits              how often the dispatcher waited on this watch's full buffer
--   blocked_seconds            how long in all (waits on one write for several watches overlap)
--   resource_blocked_seconds   how long the resource's dispatcher was held back in all, by any
--                              watch (per write, its longest wait): every watch of the resource
--                              received its later writes that much later
--   terminations               how often the watch was terminated (its buffer stayed full
--                              beyond the budget)
--   rewatches                  of those, how many recovered by watching again from the window
--   relists                    re-lists (a termination whose version had left the window needs
--                              one, or more if the list's own version leaves it too)
--   listed_objects             objects those re-lists listed, in all
--   list_seconds               their durations in all: from the LIST to its last delta handled
--   frozen_seconds             how long the watcher's view of the resource was frozen in all:
--                              from each termination until it had applied every write it missed
--                              (a termination before the last one recovered extends the same
--                              frozen spell: overlapping spells count once)
--   max_frozen_seconds         the longest spell (null without terminations)
--
-- Parameters: from_ts, to_ts select waits, terminations and re-lists by when they began; watcher
-- selects watchers by name.
WITH watches AS (
    SELECT run, watcher, unnest(string_split(resources, ',')) AS resource
    FROM watchers
    WHERE watcher_selected(watcher)
), waits AS (
    SELECT run, resource, watcher, count(*) AS blocked_waits,
           sum(epoch_us(end_ts) - epoch_us(start_ts)) / 1e6 AS blocked_seconds
    FROM dispatch_waits
    WHERE in_time_window(start_ts)
    GROUP BY ALL
), stalls AS (
    SELECT run, resource, sum(longest) / 1e6 AS resource_blocked_seconds
    FROM (SELECT run, resource, rv, max(epoch_us(end_ts) - epoch_us(start_ts)) AS longest
          FROM dispatch_waits
          WHERE in_time_window(start_ts)
          GROUP BY ALL)
    GROUP BY ALL
), closed AS (
    SELECT run, resource, watcher, count(*) AS terminations,
           count(*) FILTER (recovery = 'rewatch') AS rewatches
    FROM watch_terminations
    WHERE in_time_window(ts)
    GROUP BY ALL
), reached AS (
    -- each termination with the latest recovery of the watch's earlier terminations
    SELECT run, resource, watcher, ts, recovered_ts,
           max(recovered_ts) OVER (PARTITION BY run, resource, watcher ORDER BY ts, recovered_ts
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
    FROM watch_terminations
    WHERE in_time_window(ts)
), spells AS (
    -- frozen spells: a termination after every earlier one had recovered starts a new one
    SELECT run, resource, watcher, min(ts) AS start_ts, max(recovered_ts) AS end_ts
    FROM (SELECT *, count(*) FILTER (before IS NULL OR ts > before)
                        OVER (PARTITION BY run, resource, watcher ORDER BY ts, recovered_ts
                              ROWS UNBOUNDED PRECEDING) AS spell
          FROM reached)
    GROUP BY run, resource, watcher, spell
), frozen AS (
    SELECT run, resource, watcher,
           sum(epoch_us(end_ts) - epoch_us(start_ts)) / 1e6 AS frozen_seconds,
           max(ms_between(start_ts, end_ts)) / 1000 AS max_frozen_seconds
    FROM spells
    GROUP BY ALL
), lists AS (
    SELECT run, resource, watcher, count(*) AS relists, sum(objects) AS listed_objects,
           sum(epoch_us(end_ts) - epoch_us(start_ts)) / 1e6 AS list_seconds
    FROM relists
    WHERE in_time_window(start_ts)
    GROUP BY ALL
)
SELECT watches.run, watches.resource, watches.watcher,
       coalesce(blocked_waits, 0) AS blocked_waits,
       coalesce(blocked_seconds, 0) AS blocked_seconds,
       coalesce(resource_blocked_seconds, 0) AS resource_blocked_seconds,
       coalesce(terminations, 0) AS terminations,
       coalesce(rewatches, 0) AS rewatches,
       coalesce(relists, 0) AS relists,
       coalesce(listed_objects, 0)::BIGINT AS listed_objects,
       coalesce(list_seconds, 0) AS list_seconds,
       coalesce(frozen_seconds, 0) AS frozen_seconds,
       max_frozen_seconds
FROM watches
LEFT JOIN waits USING (run, resource, watcher)
LEFT JOIN stalls USING (run, resource)
LEFT JOIN closed USING (run, resource, watcher)
LEFT JOIN frozen USING (run, resource, watcher)
LEFT JOIN lists USING (run, resource, watcher)
ORDER BY run, resource, watcher;
