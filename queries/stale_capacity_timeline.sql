-- stale_capacity_timeline: stale_capacity_summary.sql minute by minute and per watcher role: when
-- the views were blind to free capacity (or saw capacity already taken), and what it cost.
--
-- A window counts in the minute (UTC) in which it starts, whole: windows last milliseconds to
-- seconds, far less than a minute, except those a missed write leaves open.
--
-- One row per run, minute of the run (from the minute of its first timestamp to that of its
-- last, within from_ts and to_ts; or bucket of bucket_minutes minutes) and watcher_role with a view of capacity (it watches pods and
-- nodes), windows or not:
--   run                      the run directory's name
--   minute                   the minute in which the windows started (with bucket_minutes,
--                            the first minute of their bucket: views.sql, bucket_of)
--   watcher_role             scheduler, binder, kubelet, ...
--   windows                  stale windows of any resource
--   blind_core_seconds       cpu shortfall integrated over the stale cpu windows, core-seconds
--   wasted_core_seconds      the same over the wasted ones (a pending pod fit the truth, not the
--                            view)
--   phantom_windows          phantom windows of any resource
--   phantom_core_seconds     cpu excess integrated over the phantom cpu windows, core-seconds
--   conflicted_core_seconds  the same over those during which the watcher, as a scheduler,
--                            decided an attempt on the node that ended in conflict
--
-- Parameters: from_ts, to_ts select windows by start_ts; watcher selects watchers by name;
-- bucket_minutes sets the rows' width.
WITH roles AS (
    SELECT DISTINCT viewers.run, watchers.role AS watcher_role
    FROM capacity_viewers AS viewers
    JOIN watchers USING (run, watcher)
    WHERE watcher_selected(viewers.watcher)
), each_watcher AS (
    -- each watcher's minutes first, then its role's: joining the few sums of each watcher to
    -- the watchers' roles, rather than every window, took a seventh less CPU time on two 1M-pod
    -- runs.
    -- Core-seconds as whole nano-core-seconds (core_ns, as core_seconds adds them), so that a
    -- role's are the sum of its watchers' exactly
    SELECT run, watcher, bucket_of(start_ts) AS minute,
           count(*) FILTER (kind = 'stale') AS windows,
           sum(core_ns(gap_seconds)) FILTER (kind = 'stale' AND resource = 'cpu')
               AS blind_core_ns,
           sum(core_ns(gap_seconds)) FILTER (kind = 'stale' AND resource = 'cpu'
                                                         AND wasted) AS wasted_core_ns,
           count(*) FILTER (kind = 'phantom') AS phantom_windows,
           sum(core_ns(gap_seconds)) FILTER (kind = 'phantom' AND resource = 'cpu')
               AS phantom_core_ns,
           sum(core_ns(gap_seconds)) FILTER (kind = 'phantom' AND resource = 'cpu'
                                                         AND conflicts > 0) AS conflicted_core_ns
    FROM capacity_windows
    WHERE in_time_window(start_ts) AND watcher_selected(watcher)
    GROUP BY run, watcher, minute
), windows AS (
    SELECT run, watchers.role AS watcher_role, minute,
           sum(windows) AS windows, sum(blind_core_ns) AS blind_core_ns,
           sum(wasted_core_ns) AS wasted_core_ns, sum(phantom_windows) AS phantom_windows,
           sum(phantom_core_ns) AS phantom_core_ns, sum(conflicted_core_ns) AS conflicted_core_ns
    FROM each_watcher
    JOIN watchers USING (run, watcher)
    GROUP BY run, watcher_role, minute
)
SELECT run, minute, watcher_role,
       coalesce(windows, 0)::BIGINT AS windows,
       coalesce(blind_core_ns, 0) / 1e9 AS blind_core_seconds,
       coalesce(wasted_core_ns, 0) / 1e9 AS wasted_core_seconds,
       coalesce(phantom_windows, 0)::BIGINT AS phantom_windows,
       coalesce(phantom_core_ns, 0) / 1e9 AS phantom_core_seconds,
       coalesce(conflicted_core_ns, 0) / 1e9 AS conflicted_core_seconds
FROM run_buckets
JOIN roles USING (run)
LEFT JOIN windows USING (run, watcher_role, minute)
ORDER BY run, minute, watcher_role;
