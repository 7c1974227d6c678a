-- capacity_windows.sql: how `replay run` derives a run's capacity_windows table from its other
-- tables (and `replay derive` again, after a table or this file changed).  Plain DuckDB SQL over
-- the views of ../views.sql, with run_dirs naming one run; in Python:
--
--   con.execute("SET VARIABLE run_dirs = ['runs/sample-observe']")
--   con.execute(open('queries/views.sql').read())
--   con.sql(open('queries/derived/capacity_windows.sql').read()).write_parquet('windows.parquet')
--
-- (views.sql ends with the view of this table, which needs the file; for a run without one,
-- execute views.sql only up to its "Derived tables" section, as `replay derive` does.)
--
-- Why a table and not a view: the windows of a run take five times as long to compute as all
-- the other queries together (20 s for a 1M-pod run), and the three queries that read them
-- would each compute them again.  Computed once with the run, they are read in about a second.
--
-- One row per maximal interval during which a watcher's view of a node's free capacity of one
-- resource (cpu, memory, gpu) differs from the truth (the rules: the header of the free capacity
-- section of views.sql), ordered by watcher, node, resource and start_ts:
--   watcher, node, resource
--   kind              'stale': the view shows less free capacity than there is; 'phantom': more
--   start_ts, end_ts  the window [start_ts, end_ts); one still open at the end of the run ends at
--                     the run's last timestamp (run_bounds)
--   open_at_end       the window was still open when the run ended: the watcher never received
--                     a write of the node, or never forgot an assumption, so its view never
--                     caught up with the truth (`replay check` fails on these: views_converge)
--   gap_max           the largest difference, in cores, GiB or GPUs
--   gap_seconds       its integral over time: core-seconds, GiB-seconds or GPU-seconds
--   wasted            stale windows only: a pod was pending at some instant of the window whose
--                     request of the resource was above the view's free capacity there and within
--                     the truth's.  A pod is pending from its create until its binding or its
--                     delete commits (until the end of the run if neither does; a pod created on
--                     its node is never pending: pods.bound_ts); a pod created before the trace
--                     (pods.created_ts is null) from the run's start: one listed pending waits
--                     from the trace's first commit (one listed on its node is bound then, and
--                     one the replay did not list has no requests)
--   conflicts         phantom windows only: attempts of the watcher, as a scheduler, on the node,
--                     decided during the window and ending in conflict
--
-- How: each watcher is compared with the truth as its kind of cache counts it (claims,
-- capacity_viewers.counts_assumed).  A view differs from the truth on a node while a change to
-- the node is committed but not yet applied by the watcher, and while an assumption of its own
-- is held longer than the truth needs.  A watcher mostly applies a node's changes in commit
-- order, so most such lags overlap no other lag or change on the same node: each of those is a
-- window by itself.  Only the others (and every change of a node whose changes the watcher
-- applied out of commit order) are cut into segments at every instant where the truth or the
-- view changes, and merged into windows.
-- Watchers and nodes are numbered in the order of their names, so that the millions of rows are
-- joined and ordered by numbers, not names.
-- `replay derive` computes the expressions from `received` to `windows` (and `stale_segments`)
-- in numpy instead (replay/analysis/windows.py), and `every_change`'s claims
-- (replay/analysis/claims.py), `truths`, the window functions of `changes`
-- (replay/analysis/changes.py), `pending` (replay/analysis/pending.py), `wasted`
-- (replay/analysis/wasted.py), and the final query (replay/analysis/window_rows.py) too; this
-- file stays the definition, and the tests keep the stored table identical to this query run
-- whole.
WITH bounds AS MATERIALIZED (
    FROM run_bounds
), every_change AS MATERIALIZED (
    FROM capacity_changes
), counted_apart AS MATERIALIZED (
    -- runs where caches that count assumed pods and caches that do not see different changes
    SELECT DISTINCT run FROM every_change WHERE counts_assumed IS NOT NULL
), viewers AS MATERIALIZED (
    -- class: which changes the viewer's cache counts, in a run where that matters (else null)
    SELECT run, watcher, node AS only_node,
           CASE WHEN run IN (SELECT run FROM counted_apart) THEN counts_assumed END AS class,
           row_number() OVER (ORDER BY run, watcher) AS viewer_id
    FROM capacity_viewers
), all_changes AS MATERIALIZED (
    -- every change once per class of cache that counts it (once, class null, where they agree)
    SELECT every_change.* EXCLUDE (counts_assumed), NULL::BOOLEAN AS class
    FROM every_change
    ANTI JOIN counted_apart USING (run)
    UNION ALL
    SELECT every_change.* EXCLUDE (counts_assumed), classes.class
    FROM every_change
    SEMI JOIN counted_apart USING (run)
    JOIN (VALUES (true), (false)) AS classes(class)
      ON every_change.counts_assumed IS NULL OR every_change.counts_assumed = classes.class
), nodes AS MATERIALIZED (
    SELECT run, node, row_number() OVER (ORDER BY run, node) AS node_id
    FROM (SELECT DISTINCT run, node FROM all_changes)
), truths AS MATERIALIZED (
    -- each change with, on its node as its class of cache counts it: the truth's free capacity
    -- after it, the previous change and the next one's commit
    SELECT row_number() OVER () AS change_id, all_changes.class,
           all_changes.run, all_changes.rv, all_changes.commit_ts, all_changes.node, nodes.node_id,
           all_changes.cpu_milli, all_changes.memory_bytes, all_changes.gpu_milli,
           (sum(all_changes.cpu_milli) OVER by_node)::BIGINT AS truth_cpu,
           (sum(all_changes.memory_bytes) OVER by_node)::BIGINT AS truth_memory,
           (sum(all_changes.gpu_milli) OVER by_node)::BIGINT AS truth_gpu,
           lag(all_changes.rv) OVER by_node AS previous_rv,
           lead(all_changes.commit_ts) OVER by_node AS next_commit_ts,
           all_changes.attempt_id
    FROM all_changes
    JOIN nodes USING (run, node)
    WINDOW by_node AS (PARTITION BY nodes.node_id, all_changes.class ORDER BY all_changes.rv)
), changes AS MATERIALIZED (
    -- and, for a claim, the assumption its scheduler held: from the claim's commit (or the
    -- decision, if later) until the scheduler forgot it
    SELECT truths.* EXCLUDE (attempt_id),
           attempts.scheduler AS assumed_by,
           attempts.node = truths.node AS assumed_here,
           greatest(attempts.decided_ts, truths.commit_ts) AS assumed_from,
           coalesce(attempts.forgotten_ts, bounds.end_ts) AS assumed_until,
           attempts.forgotten_ts IS NULL AS never_forgotten,
           attempts.node AS assumed_on
    FROM truths
    JOIN bounds USING (run)
    LEFT JOIN attempts
      ON attempts.run = truths.run AND attempts.attempt_id = truths.attempt_id
), received AS MATERIALIZED (
    -- each change as each viewer received it.  view_ts: when it entered the view, at its commit
    -- for the viewer's own claim if it assumed the pod from then until it applied the claim (a
    -- pod counts once: holding the assumption longer changes nothing)
    SELECT viewers.viewer_id, changes.change_id, changes.node_id, changes.rv, changes.previous_rv,
           changes.commit_ts, changes.next_commit_ts, deliveries.applied_ts,
           CASE WHEN changes.assumed_by = deliveries.watcher AND changes.assumed_here
                     AND changes.assumed_from = changes.commit_ts
                     AND changes.assumed_until >= deliveries.applied_ts
                THEN changes.commit_ts ELSE deliveries.applied_ts END AS view_ts,
           coalesce(changes.assumed_by = deliveries.watcher, false) AS own,
           changes.cpu_milli, changes.memory_bytes, changes.gpu_milli,
           changes.truth_cpu, changes.truth_memory, changes.truth_gpu
    FROM deliveries
    JOIN changes USING (run, rv)
    JOIN viewers
      ON viewers.run = deliveries.run AND viewers.watcher = deliveries.watcher
     AND (viewers.only_node IS NULL OR viewers.only_node = changes.node)
     AND viewers.class IS NOT DISTINCT FROM changes.class
), shortfall AS (
    -- viewers that received fewer changes than they watch
    SELECT viewers.*
    FROM viewers
    LEFT JOIN (SELECT viewer_id, count(*) AS changes FROM received GROUP BY viewer_id) AS got
      USING (viewer_id)
    LEFT JOIN (SELECT run, class, count(*) AS changes FROM changes GROUP BY run, class) AS per_run
      ON per_run.run = viewers.run AND per_run.class IS NOT DISTINCT FROM viewers.class
    LEFT JOIN (SELECT run, node, class, count(*) AS changes FROM changes GROUP BY ALL) AS per_node
      ON per_node.run = viewers.run AND per_node.node = viewers.only_node
     AND per_node.class IS NOT DISTINCT FROM viewers.class
    WHERE coalesce(got.changes, 0)
          < coalesce(CASE WHEN only_node IS NULL THEN per_run.changes ELSE per_node.changes END, 0)
), missed AS (
    -- changes a viewer never received: it stays blind to them until the end of the run
    SELECT shortfall.viewer_id, changes.change_id, changes.node_id, changes.rv, changes.previous_rv,
           changes.commit_ts, changes.next_commit_ts, NULL::TIMESTAMPTZ AS applied_ts,
           bounds.end_ts AS view_ts, coalesce(changes.assumed_by = shortfall.watcher, false) AS own,
           changes.cpu_milli, changes.memory_bytes, changes.gpu_milli,
           changes.truth_cpu, changes.truth_memory, changes.truth_gpu
    FROM shortfall
    JOIN bounds USING (run)
    JOIN (SELECT run, node AS only_node, node_id FROM nodes  -- a kubelet watches its node
          UNION ALL
          SELECT run, NULL, node_id FROM nodes) AS watched   -- a scheduler every node
      ON watched.run = shortfall.run AND watched.only_node IS NOT DISTINCT FROM shortfall.only_node
    JOIN changes
      ON changes.node_id = watched.node_id AND changes.class IS NOT DISTINCT FROM shortfall.class
    ANTI JOIN received USING (viewer_id, change_id)
), lags AS (
    FROM received
    UNION ALL
    FROM missed
), unplaced_attempts AS MATERIALIZED (
    -- attempts whose claim did not place their pod (it failed, or the pod was placed already)
    -- but that their scheduler held after their commit
    SELECT *
    FROM attempts
    ANTI JOIN (SELECT run, attempt_id  -- the attempts that wrote a binding or an assume patch
               FROM events
               WHERE attempt_id IS NOT NULL AND resource = 'pods'
                 AND ((verb = 'create' AND subresource = 'binding') OR pod_state = 'assumed'))
      USING (run, attempt_id)
    WHERE node IS NOT NULL
      AND (forgotten_ts IS NULL OR forgotten_ts > greatest(decided_ts, committed_ts))
), other_attempts AS MATERIALIZED (
    -- with their pod: the latest incarnation of its name created by the decision (created_rv)
    -- and its requests
    SELECT unplaced.run, unplaced.attempt_id, unplaced.scheduler, unplaced.node, unplaced.pod,
           greatest(unplaced.decided_ts, unplaced.committed_ts) AS start_ts,
           unplaced.forgotten_ts,
           max(creates.rv) AS created_rv,
           -arg_max(coalesce(creates.cpu_milli, 0), creates.rv) AS cpu_milli,
           -arg_max(coalesce(creates.memory_bytes, 0), creates.rv) AS memory_bytes,
           -arg_max(coalesce(creates.gpu_milli, 0), creates.rv) AS gpu_milli
    FROM unplaced_attempts AS unplaced
    JOIN events AS creates
      ON creates.run = unplaced.run AND creates.resource = 'pods' AND creates.verb = 'create'
     AND creates.subresource IS NULL
     AND concat_ws('/', creates.namespace, creates.name) = unplaced.pod
     AND creates.commit_ts <= unplaced.decided_ts
    GROUP BY ALL
), other_placements AS (
    -- the claim that placed the same pod, if it placed it on the node the attempt chose: once it
    -- is in the scheduler's view, the pod counts as placed, not as assumed
    SELECT other.attempt_id, arg_min(placed.rv, placed.rv) AS rv,
           arg_min(placed.node, placed.rv) AS node
    FROM other_attempts AS other
    JOIN all_changes AS placed
      ON placed.run = other.run AND placed.pod = other.pod
     AND placed.change IN ('binding', 'assumed') AND placed.class IS NOT false
     AND (placed.cpu_milli < 0 OR placed.memory_bytes < 0 OR placed.gpu_milli < 0)  -- it takes
     AND placed.rv > other.created_rv
    WHERE NOT EXISTS (SELECT 1 FROM events AS later
                      WHERE later.run = other.run AND later.resource = 'pods'
                        AND later.verb = 'create' AND later.subresource IS NULL
                        AND concat_ws('/', later.namespace, later.name) = other.pod
                        AND later.rv > other.created_rv AND later.rv < placed.rv)
    GROUP BY other.attempt_id
), held AS (
    -- assumptions held longer than the truth needs: own claims not folded above, and other
    -- attempts from their commit (or failure); each until forgotten, or until the pod's claim
    -- on that node is in the scheduler's view (from then on the pod counts as placed)
    SELECT viewer_id, node_id, start_ts, end_ts, at_end, cpu_milli, memory_bytes, gpu_milli
    FROM (
        SELECT lags.viewer_id, nodes.node_id, changes.assumed_from AS start_ts,
               least(changes.assumed_until, lags.applied_ts) AS end_ts,
               changes.never_forgotten AND lags.applied_ts IS NULL AS at_end,
               changes.cpu_milli, changes.memory_bytes, changes.gpu_milli
        FROM lags
        JOIN viewers USING (viewer_id)
        JOIN changes USING (change_id)
        JOIN nodes ON nodes.run = changes.run AND nodes.node = changes.assumed_on
        WHERE lags.own AND lags.view_ts IS DISTINCT FROM lags.commit_ts
          AND (viewers.only_node IS NULL OR viewers.only_node = changes.assumed_on)
    )
    WHERE end_ts > start_ts
    UNION ALL
    SELECT viewer_id, node_id, start_ts, end_ts, at_end, cpu_milli, memory_bytes, gpu_milli
    FROM (
        SELECT viewers.viewer_id, nodes.node_id, other.start_ts,
               least(coalesce(other.forgotten_ts, bounds.end_ts), placement.view_ts) AS end_ts,
               other.forgotten_ts IS NULL AND coalesce(placement.missed, true) AS at_end,
               other.cpu_milli, other.memory_bytes, other.gpu_milli
        FROM other_attempts AS other
        JOIN bounds USING (run)
        JOIN viewers
          ON viewers.run = other.run AND viewers.watcher = other.scheduler
         AND (viewers.only_node IS NULL OR viewers.only_node = other.node)
        JOIN nodes ON nodes.run = other.run AND nodes.node = other.node
        LEFT JOIN (SELECT other_placements.attempt_id, lags.viewer_id, lags.view_ts,
                          lags.applied_ts IS NULL AS missed
                   FROM other_placements
                   JOIN other_attempts USING (attempt_id)
                   JOIN nodes AS placed_on
                     ON placed_on.run = other_attempts.run AND placed_on.node = other_placements.node
                   JOIN lags
                     ON lags.rv = other_placements.rv AND lags.node_id = placed_on.node_id
                   WHERE other_placements.node = other_attempts.node) AS placement
          ON placement.attempt_id = other.attempt_id AND placement.viewer_id = viewers.viewer_id
    )
    WHERE end_ts > start_ts
), inverted AS (
    -- (viewer, node) pairs with a change applied before the change committed before it (its
    -- nodes and pods informers are separate queues; a re-list applies its deltas by key)
    SELECT DISTINCT lags.viewer_id, lags.node_id
    FROM lags
    JOIN lags AS previous
      ON previous.viewer_id = lags.viewer_id AND previous.node_id = lags.node_id
     AND previous.rv = lags.previous_rv
    WHERE previous.applied_ts > lags.applied_ts
), irregular AS (
    -- (viewer, node) pairs with a missed change, a held assumption or changes applied out of
    -- commit order: cut into segments
    SELECT DISTINCT viewer_id, node_id FROM missed
    UNION
    SELECT DISTINCT viewer_id, node_id FROM held
    UNION
    FROM inverted
), classified AS MATERIALIZED (
    -- alone: the change's lag overlaps or touches no other change of the node (touching
    -- windows may merge); the other pairs apply the node's changes in commit order, so only the
    -- previous change's lag can reach into this one
    SELECT lags.viewer_id, lags.node_id, lags.rv, lags.commit_ts, lags.view_ts,
           lags.cpu_milli, lags.memory_bytes, lags.gpu_milli,
           lags.truth_cpu, lags.truth_memory, lags.truth_gpu, lags.applied_ts IS NULL AS missed,
           irregular.viewer_id IS NULL
           AND (previous.applied_ts IS NULL OR previous.applied_ts < lags.commit_ts)
           AND (lags.next_commit_ts IS NULL OR lags.next_commit_ts > lags.view_ts) AS alone
    FROM lags
    LEFT JOIN lags AS previous
      ON previous.viewer_id = lags.viewer_id AND previous.node_id = lags.node_id
     AND previous.rv = lags.previous_rv
    LEFT JOIN irregular
      ON irregular.viewer_id = lags.viewer_id AND irregular.node_id = lags.node_id
), lone_windows AS MATERIALIZED (
    -- a lag that overlaps no other change is a window: the view lacks exactly this change
    SELECT viewer_id, node_id, resource, start_ts, end_ts, -change AS gap, truth,
           truth - change AS view
    FROM (
        SELECT viewer_id, node_id, commit_ts AS start_ts, view_ts AS end_ts,
               unnest([{'resource': 'cpu', 'change': cpu_milli, 'truth': truth_cpu},
                       {'resource': 'memory', 'change': memory_bytes, 'truth': truth_memory},
                       {'resource': 'gpu', 'change': gpu_milli, 'truth': truth_gpu}],
                      recursive := true)
        FROM classified
        WHERE alone AND view_ts > commit_ts
    )
    WHERE change <> 0
), points AS (
    -- the others: every instant at which the truth or the view changes.  at_end: the step is the
    -- stand-in at the run's end for a change never received or an assumption never forgotten
    SELECT viewer_id, node_id, commit_ts AS ts, rv,
           CASE WHEN view_ts > commit_ts THEN -cpu_milli ELSE 0 END AS gap_cpu,
           CASE WHEN view_ts > commit_ts THEN -memory_bytes ELSE 0 END AS gap_memory,
           CASE WHEN view_ts > commit_ts THEN -gpu_milli ELSE 0 END AS gap_gpu,
           truth_cpu, truth_memory, truth_gpu, false AS at_end
    FROM classified
    WHERE NOT alone
    UNION ALL
    SELECT viewer_id, node_id, view_ts, NULL, cpu_milli, memory_bytes, gpu_milli, NULL, NULL, NULL,
           missed
    FROM classified
    WHERE NOT alone AND view_ts > commit_ts
    UNION ALL
    SELECT viewer_id, node_id, start_ts, NULL, cpu_milli, memory_bytes, gpu_milli, NULL, NULL, NULL,
           false
    FROM held
    UNION ALL
    SELECT viewer_id, node_id, end_ts, NULL, -cpu_milli, -memory_bytes, -gpu_milli, NULL, NULL, NULL,
           at_end
    FROM held
), instants AS (
    SELECT viewer_id, node_id, ts,
           sum(gap_cpu)::BIGINT AS step_cpu, sum(gap_memory)::BIGINT AS step_memory,
           sum(gap_gpu)::BIGINT AS step_gpu,
           arg_max({'cpu': truth_cpu, 'memory': truth_memory, 'gpu': truth_gpu}, rv) AS truth,
           coalesce(sum(gap_cpu) FILTER (at_end), 0) <> 0 AS ends_cpu,
           coalesce(sum(gap_memory) FILTER (at_end), 0) <> 0 AS ends_memory,
           coalesce(sum(gap_gpu) FILTER (at_end), 0) <> 0 AS ends_gpu
    FROM points
    GROUP BY viewer_id, node_id, ts
), stepped AS (
    -- from each instant to the next: the difference (view minus truth) and the truth's free
    -- capacity, and whether a window starts there: the difference takes a sign it did not have
    SELECT *,
           gap_cpu <> 0 AND sign(gap_cpu) <> sign(gap_cpu - step_cpu) AS starts_cpu,
           gap_memory <> 0 AND sign(gap_memory) <> sign(gap_memory - step_memory) AS starts_memory,
           gap_gpu <> 0 AND sign(gap_gpu) <> sign(gap_gpu - step_gpu) AS starts_gpu
    FROM (
        SELECT viewer_id, node_id, ts AS start_ts, lead(ts) OVER by_ts AS end_ts,
               step_cpu, step_memory, step_gpu,
               -- whether the next instant is the run's end standing in for a missed change or
               -- a forgotten assumption in this resource: the view never caught up
               lead(ends_cpu) OVER by_ts AS open_cpu, lead(ends_memory) OVER by_ts AS open_memory,
               lead(ends_gpu) OVER by_ts AS open_gpu,
               (sum(step_cpu) OVER by_ts)::BIGINT AS gap_cpu,
               (sum(step_memory) OVER by_ts)::BIGINT AS gap_memory,
               (sum(step_gpu) OVER by_ts)::BIGINT AS gap_gpu,
               last_value(truth IGNORE NULLS) OVER by_ts AS truth
        FROM instants
        WINDOW by_ts AS (PARTITION BY viewer_id, node_id ORDER BY ts)
    )
), merged_segments AS MATERIALIZED (
    -- the segments where view and truth differ, each named by the start of its window: the
    -- latest start at or before it
    SELECT viewer_id, node_id, resource, start_ts, end_ts, window_ts, gap, truth, truth + gap AS view,
           open
    FROM (
        SELECT viewer_id, node_id, start_ts, end_ts,
               unnest([{'resource': 'cpu', 'gap': gap_cpu, 'truth': coalesce(truth.cpu, 0),
                        'window_ts': max(CASE WHEN starts_cpu THEN start_ts END) OVER by_ts,
                        'open': coalesce(open_cpu, false)},
                       {'resource': 'memory', 'gap': gap_memory,
                        'truth': coalesce(truth.memory, 0),
                        'window_ts': max(CASE WHEN starts_memory THEN start_ts END) OVER by_ts,
                        'open': coalesce(open_memory, false)},
                       {'resource': 'gpu', 'gap': gap_gpu, 'truth': coalesce(truth.gpu, 0),
                        'window_ts': max(CASE WHEN starts_gpu THEN start_ts END) OVER by_ts,
                        'open': coalesce(open_gpu, false)}],
                      recursive := true)
        FROM stepped
        WINDOW by_ts AS (PARTITION BY viewer_id, node_id ORDER BY start_ts)
    )
    WHERE gap <> 0
), windows AS MATERIALIZED (
    SELECT viewer_id, node_id, resource, start_ts, end_ts, false AS open_at_end,
           gap < 0 AS stale, abs(gap) AS gap_max,
           abs(gap)::HUGEINT * (epoch_us(end_ts) - epoch_us(start_ts)) AS gap_us
    FROM lone_windows
    UNION ALL
    SELECT viewer_id, node_id, resource, window_ts, max(end_ts), bool_or(open), any_value(gap) < 0,
           max(abs(gap)), sum(abs(gap)::HUGEINT * (epoch_us(end_ts) - epoch_us(start_ts)))
    FROM merged_segments
    GROUP BY viewer_id, node_id, resource, window_ts
), pending AS (
    -- pods waiting to be placed, by request size: reach_ts is the latest end among those of the
    -- same size that started by start_ts
    SELECT run, resource, request, start_ts,
           max(end_ts) OVER (PARTITION BY run, resource, request ORDER BY start_ts) AS reach_ts
    FROM (
        SELECT run, coalesce(created_ts, bounds.start_ts) AS start_ts,
               coalesce(least(bound_ts, deleted_ts), bounds.end_ts) AS end_ts,
               unnest([{'resource': 'cpu', 'request': cpu_milli},
                       {'resource': 'memory', 'request': memory_bytes},
                       {'resource': 'gpu', 'request': gpu_milli}], recursive := true)
        FROM pods
        JOIN bounds USING (run)
    )
    WHERE request > 0 AND end_ts > start_ts
), stale_segments AS (
    SELECT viewer_id, node_id, resource, start_ts, end_ts, start_ts AS window_ts, truth, view
    FROM lone_windows
    WHERE gap < 0
    UNION ALL
    SELECT viewer_id, node_id, resource, start_ts, end_ts, window_ts, truth, view
    FROM merged_segments
    WHERE gap < 0
), wasted AS (
    -- stale windows with a segment during which a pending pod fit the truth's free capacity
    -- but not the view's
    SELECT DISTINCT segments.viewer_id, segments.node_id, segments.resource,
           segments.window_ts AS start_ts
    FROM stale_segments AS segments
    JOIN viewers USING (viewer_id)
    JOIN (SELECT DISTINCT run, resource, request FROM pending) AS sizes
      ON sizes.run = viewers.run AND sizes.resource = segments.resource
     AND sizes.request > segments.view AND sizes.request <= segments.truth
    ASOF JOIN pending
      ON pending.run = sizes.run AND pending.resource = sizes.resource
     AND pending.request = sizes.request AND segments.end_ts > pending.start_ts
    WHERE pending.reach_ts > segments.start_ts
), conflicted AS (
    -- phantom windows and the conflicting attempts their watcher decided during them
    SELECT windows.viewer_id, windows.node_id, windows.resource, windows.start_ts,
           count(*) AS conflicts
    FROM attempts
    JOIN viewers ON viewers.run = attempts.run AND viewers.watcher = attempts.scheduler
    JOIN nodes ON nodes.run = attempts.run AND nodes.node = attempts.node
    JOIN windows
      ON windows.viewer_id = viewers.viewer_id AND windows.node_id = nodes.node_id
     AND attempts.decided_ts >= windows.start_ts AND attempts.decided_ts < windows.end_ts
    WHERE attempts.outcome = 'conflict' AND NOT windows.stale
    GROUP BY ALL
)
-- names by joining the numbered watchers and nodes (a list of names indexed per row, which an
-- earlier version used, is copied row by row by DuckDB once the list depends on the changes:
-- minutes and gigabytes for a 50,000-pod run)
SELECT viewers.watcher, nodes.node,
       resource,
       CASE WHEN stale THEN 'stale' ELSE 'phantom' END AS kind,
       start_ts, end_ts, open_at_end,
       gap_max / unit_size(resource) AS gap_max,
       gap_us::DOUBLE / 1e6 / unit_size(resource) AS gap_seconds,
       CASE WHEN stale THEN wasted.start_ts IS NOT NULL END AS wasted,
       CASE WHEN NOT stale THEN coalesce(conflicted.conflicts, 0) END AS conflicts
FROM windows
JOIN viewers USING (viewer_id)
JOIN nodes USING (node_id)
LEFT JOIN wasted USING (viewer_id, node_id, resource, start_ts)
LEFT JOIN conflicted USING (viewer_id, node_id, resource, start_ts)
ORDER BY viewer_id, node_id, resource, start_ts
