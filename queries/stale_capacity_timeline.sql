-- stale_capacity_timeline: stale_capacity_summary.sql minute by minute and per watcher role: when
-- the views were blind to free capacity (or saw capacity already taken), and what it cost.
--
-- A window counts in the minute (UTC) in which it starts, whole: windows last milliseconds to
-- seconds, far less than a minute, except those a missed write leaves open.
--
-- One row per run, minute of the run (from the minute of its first timestamp to that of its
-- last, within from_ts and to_ts) and watcher_role with a view of capacity (it watches pods and
-- nodes), windows or not:
--   run                      the run directory's name
--   minute                   the minute in which the windows started
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
-- Parameters: from_ts, to_ts select windows by start_ts; watcher selects watchers by name.
WITH roles AS (
    SELECT DISTINCT viewers.run, watchers.role AS watcher_role
    FROM capacity_viewers AS viewers
    JOIN watchers USING (run, watcher)
    WHERE watcher_selected(viewers.watcher)
), windows AS (
    SELECT run, watchers.role AS watcher_role, minute_of(start_ts) AS minute,
           kind, resource, gap_seconds, wasted, conflicts
    FROM capacity_windows
    JOIN watchers USING (run, watcher)
    WHERE in_time_window(start_ts) AND watcher_selected(watcher)
)
SELECT run, minute, watcher_role,
       count(kind) FILTER (kind = 'stale') AS windows,
       core_seconds(gap_seconds, kind = 'stale' AND resource = 'cpu') AS blind_core_seconds,
       core_seconds(gap_seconds, kind = 'stale' AND resource = 'cpu' AND wasted)
           AS wasted_core_seconds,
       count(kind) FILTER (kind = 'phantom') AS phantom_windows,
       core_seconds(gap_seconds, kind = 'phantom' AND resource = 'cpu') AS phantom_core_seconds,
       core_seconds(gap_seconds, kind = 'phantom' AND resource = 'cpu' AND conflicts > 0)
           AS conflicted_core_seconds
FROM run_minutes
JOIN roles USING (run)
LEFT JOIN windows USING (run, watcher_role, minute)
GROUP BY ALL
ORDER BY run, minute, watcher_role;
