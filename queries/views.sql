-- views.sql: one or several run directories as DuckDB views, plus the derived views the shipped
-- queries share.  Plain DuckDB SQL: it needs nothing from the replay package.
--
--   SET VARIABLE run_dirs = ['runs/sample-observe'];      -- a list of run directories (globs work)
--   .read queries/views.sql                              -- in the duckdb shell; from Python:
--                                                        -- con.execute(open(...).read())
--
-- The views read the run directories when a query runs, not when they are created, so setting
-- run_dirs again points the same views at other runs.  See queries/README.md.
--
-- Conventions: every view starts with `run` (the run directory's name) so that several runs can be
-- compared with one GROUP BY; times are UTC timestamps with microsecond precision, compared as
-- such; free capacity is in the trace's units (cpu_milli, memory_bytes, gpu_milli).

-- DuckDB plans an ASOF join whose left side it expects to be small as a nested loop; the views
-- read Parquet files whose sizes it cannot estimate, and a nested loop over the ~1M stale segments
-- of a real trace took minutes where the ASOF join takes a second.  Always plan it as ASOF.
SET asof_loop_join_threshold = 0;


---------------------------------------------------------------------------------------------------
-- The run directories: runs, and one view per table (docs/run-directory.md describes the columns)
---------------------------------------------------------------------------------------------------

-- manifests: one row per run: run, then the entries of its manifest.json as columns (an entry
-- another run's manifest has and this one's lacks is null).  The entry sweep is always there:
-- for a point of `replay sweep`, the sweep's directory name (sweep.sweep) and the values it swept.
CREATE OR REPLACE VIEW manifests AS
SELECT parse_path(filename)[-2] AS run, * EXCLUDE (filename)
FROM (
    FROM read_json([rtrim(dir, '/') || '/manifest.json' FOR dir IN getvariable('run_dirs')],
                   filename = true, union_by_name = true)
    UNION ALL BY NAME
    SELECT NULL AS filename, {'sweep': NULL::VARCHAR} AS sweep  -- the entry, if no run has it
)
WHERE filename IS NOT NULL;

-- runs: one row per run: run, model, seed, profile, trace (the trace's path), then one column per
-- model parameter of any of the runs (null for a run whose model lacks it), then sweep_points'
-- columns but run.  The parameters come from the resolved configuration in manifest.json, which
-- always names the model.
CREATE OR REPLACE VIEW runs AS
SELECT * EXCLUDE (name)
FROM (
    SELECT run,
           model.name AS model,
           seed,
           config.profile AS profile,
           trace.path AS trace,
           unnest(config.model),
           unnest(sweep)
    FROM manifests
);

-- sweep_points: one row per run: run, sweep (the directory of the sweep the run is a point of;
-- null for a run `replay sweep` did not make), then one column per key a sweep swept other than
-- the model and the seed, named as in its sweep.parquet (model_schedulers,
-- stages_network_latency_p99_ms: dots made underscores), null where a run did not sweep it;
-- and swept, the same as one struct (for ordering points by what they swept).
CREATE OR REPLACE VIEW sweep_points AS
SELECT run, sweep_name AS sweep, * EXCLUDE (run, sweep_name, sweep, swept), swept
FROM (SELECT run, sweep.sweep AS sweep_name, unnest(sweep), sweep AS swept FROM manifests);

-- table_paths('events') and so on: the path of that table's file in each run directory (a glob
-- among run_dirs stays a glob: read_parquet and glob expand it alike, to the same names).
CREATE OR REPLACE MACRO table_paths(table_name) AS
    [rtrim(dir, '/') || '/' || table_name || '.parquet' FOR dir IN getvariable('run_dirs')];

-- run_table('events') and so on: a table of every run, each row preceded by its run's name, model
-- and model parameters, and for a sweep's point, the values the sweep set (runs' columns).
-- The rows meet their run through the name of the file they were read from, matched against
-- each run's file as glob lists it: the run's name parsed out of every row's file name cost the
-- 27M deliveries of a 1M-pod run 0.1 s more a scan (on 2 cores), in every query.
CREATE OR REPLACE MACRO run_table(table_name) AS TABLE
WITH files AS (
    SELECT runs.* EXCLUDE (seed, profile, trace), file
    FROM glob(table_paths(table_name))
    JOIN runs ON runs.run = parse_path(file)[-2]
)
SELECT files.* EXCLUDE (file), rows.* EXCLUDE (filename)
FROM read_parquet(table_paths(table_name), filename = true) AS rows
JOIN files ON files.file = rows.filename;

CREATE OR REPLACE VIEW events AS FROM run_table('events');
CREATE OR REPLACE VIEW deliveries AS FROM run_table('deliveries');
CREATE OR REPLACE VIEW attempts AS FROM run_table('attempts');
CREATE OR REPLACE VIEW pods AS FROM run_table('pods');
CREATE OR REPLACE VIEW watchers AS FROM run_table('watchers');
CREATE OR REPLACE VIEW dispatch_waits AS FROM run_table('dispatch_waits');
CREATE OR REPLACE VIEW watch_terminations AS FROM run_table('watch_terminations');
CREATE OR REPLACE VIEW relists AS FROM run_table('relists');


---------------------------------------------------------------------------------------------------
-- Parameters of the shipped queries, read when a query runs (all optional):
--   from_ts, to_ts  only what happens in [from_ts, to_ts) (timestamps; each query says what "what
--                   happens" is: a write's commit, an attempt's decision, a window's start)
--   watcher         only watchers (for conflicts: schedulers) whose name matches this glob
--   bucket_minutes  the minute-by-minute queries' rows cover this many minutes each (default 1)
---------------------------------------------------------------------------------------------------

CREATE OR REPLACE MACRO in_time_window(ts) AS
    ts >= coalesce(getvariable('from_ts')::TIMESTAMPTZ, '-infinity'::TIMESTAMPTZ)
    AND ts < coalesce(getvariable('to_ts')::TIMESTAMPTZ, 'infinity'::TIMESTAMPTZ);

-- (Without the parameter, name IS NOT NULL, as name GLOB '*' is: a filter DuckDB answers from the
-- Parquet statistics, where the GLOB read and tested every name.)
CREATE OR REPLACE MACRO watcher_selected(name) AS
    CASE WHEN getvariable('watcher') IS NULL THEN name IS NOT NULL
         ELSE name GLOB getvariable('watcher') END;

-- bucket_minutes(): the width of the minute-by-minute queries' rows, in whole minutes: the
-- variable bucket_minutes, 1 unless it is set (a report of a run months long sets it, so that its
-- timelines hold a thousand points or so, not a point a minute).
CREATE OR REPLACE MACRO bucket_minutes() AS
    CASE WHEN getvariable('bucket_minutes') IS NULL THEN 1
         WHEN regexp_full_match(getvariable('bucket_minutes')::VARCHAR, '0*[1-9][0-9]{0,8}')
         THEN getvariable('bucket_minutes')::BIGINT
         ELSE error('bucket_minutes must be a whole number of minutes, 1 to 999999999, not '
                    || getvariable('bucket_minutes')::VARCHAR) END;

-- bucket_of(ts): the start (UTC) of the bucket that holds ts: the minute, as date_trunc('minute',
-- ts) in UTC, with bucket_minutes 1; buckets are counted from the epoch, so that an hour's start
-- on the hour and a day's at midnight UTC.  Computed from the epoch: date_trunc on a TIMESTAMPTZ
-- goes through the time zone library row by row, which took 1.5-2 s of CPU on the 8M deliveries
-- of a 300k-pod run where this takes 0.1 s.  The floor is an integer one (whole microseconds), so
-- the bucket is exact before 1970 too.  bucket_us(ts) is the same start as whole microseconds since
-- the epoch: an integer to group by, made a timestamp only once per group
-- (per_component_delay_timeline.sql).
CREATE OR REPLACE MACRO bucket_us(ts) AS
    epoch_us(ts) - ((epoch_us(ts) % (bucket_minutes() * 60000000))
                    + bucket_minutes() * 60000000) % (bucket_minutes() * 60000000);
CREATE OR REPLACE MACRO bucket_of(ts) AS make_timestamptz(bucket_us(ts));

-- write_key(ts, rv): a write's instant and resource version as one HUGEINT that sorts as the
-- pair (ts, rv) does, so that "the latest write of a kind" is a maximum of integers, which a
-- DuckDB window computes far more cheaply than the same maximum of structs (reaction_lag.sql);
-- write_key_us(key) and write_key_rv(key) read the pair back (the instant as epoch_us).  rv must
-- be in [0, 2^63), as events.rv is; the instant is offset by 2^63 so that every key is
-- non-negative and is read back with shifts (DuckDB refuses to shift a negative HUGEINT, and
-- divides one 30 times more slowly).
CREATE OR REPLACE MACRO write_key(ts, rv) AS
    ((epoch_us(ts)::HUGEINT + (1::HUGEINT << 63)) << 63) | rv;
CREATE OR REPLACE MACRO write_key_us(key) AS ((key >> 63) - (1::HUGEINT << 63))::BIGINT;
CREATE OR REPLACE MACRO write_key_rv(key) AS (key & ((1::HUGEINT << 63) - 1))::BIGINT;


---------------------------------------------------------------------------------------------------
-- Watch delay
---------------------------------------------------------------------------------------------------

CREATE OR REPLACE MACRO ms_between(from_ts, to_ts) AS
    (epoch_us(to_ts) - epoch_us(from_ts)) / 1000.0;

-- delivery_delays: run, watcher, watcher_role, commit_ts, then the delay in milliseconds of each
-- stage of the watch pipeline, in pipeline order (storage_to_cache, cacher_queue, watcher_queue,
-- network, client_queue, handler) and end_to_end, their sum: one row per delivery.
-- delivery_delays_us: the same in whole microseconds (BIGINT), for aggregates that add delays
-- (delay_stats) or compare them as integers.  A watcher's first list (source 'list': an object
-- observe's trace did not see created, in every cache when it began) is no delivery through
-- the pipeline, and not a delay: neither view has its rows.
CREATE OR REPLACE VIEW delivery_delays_us AS
SELECT run, watcher, role AS watcher_role, commit_ts,
       epoch_us(cached_ts) - epoch_us(commit_ts) AS storage_to_cache,
       epoch_us(dispatched_ts) - epoch_us(cached_ts) AS cacher_queue,
       epoch_us(sent_ts) - epoch_us(dispatched_ts) AS watcher_queue,
       epoch_us(received_ts) - epoch_us(sent_ts) AS network,
       epoch_us(dequeued_ts) - epoch_us(received_ts) AS client_queue,
       epoch_us(applied_ts) - epoch_us(dequeued_ts) AS handler,
       epoch_us(applied_ts) - epoch_us(commit_ts) AS end_to_end
FROM deliveries
WHERE source <> 'list';

CREATE OR REPLACE VIEW delivery_delays AS
SELECT run, watcher, watcher_role, commit_ts,
       storage_to_cache / 1000.0 AS storage_to_cache,
       cacher_queue / 1000.0 AS cacher_queue,
       watcher_queue / 1000.0 AS watcher_queue,
       network / 1000.0 AS network,
       client_queue / 1000.0 AS client_queue,
       handler / 1000.0 AS handler,
       end_to_end / 1000.0 AS end_to_end
FROM delivery_delays_us;

-- delay_stats(us): an aggregate of a delay in whole microseconds: the mean, the 50th, 90th and
-- 99th percentiles (interpolated linearly between the delays in milliseconds, computed together)
-- and the maximum, in milliseconds, as a struct.  The mean adds whole microseconds, so that it
-- is the same number whatever order DuckDB's threads add them in (a sum of doubles is not).
CREATE OR REPLACE MACRO delay_stats(us) AS {
    'mean_ms': sum(us) / count(us) / 1000,
    'percentiles': quantile_cont(us / 1000.0, [0.5, 0.9, 0.99]),
    'max_ms': max(us) / 1000.0
};


-- cdf_fractions(): the fractions at which delay_cdf.sql reads a distribution: 0, 0.01, ..., 0.99,
-- then 0.991, ..., 0.999, 0.9999 and 1, so that the tail gets points of its own.
CREATE OR REPLACE MACRO cdf_fractions() AS
    [i / 100 FOR i IN range(0, 100)] || [(990 + i) / 1000 FOR i IN range(1, 10)] || [0.9999, 1.0];

-- quantile_between(lo, hi, d): what quantile_cont returns between two neighbouring values lo
-- and hi, d of the way from lo (d > 0), bit for bit: DuckDB computes lo * (1 - d) + hi * d, which
-- its compiler makes one fused multiply-add, fma(lo, 1 - d, hi * d) (a single rounding), so the
-- plain SQL formula (two roundings) differs in the last bit on a few points in a hundred.  The
-- fma is emulated exactly in plain doubles (Boldo and Melquiond, "Emulation of FMA and correctly
-- rounded sums: proved algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008):
-- the product a * b as the sum of two doubles (Dekker's split), the sum with c as two more
-- (Knuth's two-sum), the small part rounded to odd, then one rounding to nearest.  It lets a
-- query find the two neighbours by counting instead of making quantile_cont select them among
-- every value (delay_cdf.sql, per_component_delay.sql).
CREATE OR REPLACE MACRO two_sum_error(a, b, s) AS (a - (s - (s - a))) + (b - (s - a));
CREATE OR REPLACE MACRO split_high(a) AS 134217729::DOUBLE * a - (134217729::DOUBLE * a - a);
CREATE OR REPLACE MACRO two_product_error(a, b, p) AS
    ((split_high(a) * split_high(b) - p) + split_high(a) * (b - split_high(b))
     + (a - split_high(a)) * split_high(b)) + (a - split_high(a)) * (b - split_high(b));
-- s rounded to odd, given e = (the exact value) - s: s if exact or its last bit is 1, else its
-- neighbour towards the exact value
CREATE OR REPLACE MACRO round_to_odd(s, e) AS
    CASE WHEN e = 0 OR (abs(s) / (nextafter(abs(s), 'infinity'::DOUBLE) - abs(s))) % 2 = 1 THEN s
         ELSE nextafter(s, CASE WHEN e > 0 THEN 'infinity' ELSE '-infinity' END::DOUBLE) END;
-- (high + low) + c rounded once, where high + low is an exact product
CREATE OR REPLACE MACRO sum_rounded_once(high, low, c) AS
    (c + high) + round_to_odd(two_sum_error(c, high, c + high) + low,
                              two_sum_error(two_sum_error(c, high, c + high), low,
                                            two_sum_error(c, high, c + high) + low));
CREATE OR REPLACE MACRO fused_multiply_add(a, b, c) AS
    sum_rounded_once(a * b, two_product_error(a, b, a * b), c);
CREATE OR REPLACE MACRO quantile_between(lo, hi, d) AS fused_multiply_add(lo, 1 - d, hi * d);

-- quantile_place(n, fraction): where quantile_cont places a fraction of n sorted values, as a
-- struct: (n - 1) * fraction places after the smallest, between the values at places below and
-- above (0-based), d of the way from the one below.  quantile_at(lo, hi, place): the quantile
-- there, from the values at those two places, as quantile_cont answers, bit for bit.  A query
-- that counts its values finds the two by their running counts (delay_cdf.sql,
-- per_component_delay.sql).
CREATE OR REPLACE MACRO quantile_place(n, fraction) AS {
    'below': floor((n - 1)::DOUBLE * fraction)::BIGINT,
    'above': ceil((n - 1)::DOUBLE * fraction)::BIGINT,
    'd': (n - 1)::DOUBLE * fraction - floor((n - 1)::DOUBLE * fraction)
};
CREATE OR REPLACE MACRO quantile_at(lo, hi, place) AS
    CASE WHEN place.below = place.above THEN lo ELSE quantile_between(lo, hi, place.d) END;


---------------------------------------------------------------------------------------------------
-- Free capacity: the truth, each watcher's view, and where they differ
--
-- A node's free capacity is its allocatable minus the requests of the pods that hold it (claims:
-- bound pods, and for the caches that count them, pods a Gödel scheduler assumed there).  In the
-- truth every change takes effect at its commit_ts; in a watcher's view at the watcher's applied_ts
-- for that write; a watcher is compared with the truth as its kind of cache counts it
-- (capacity_viewers.counts_assumed).  A scheduler also counts the pods it has assumed itself
-- (attempts.node from decided_ts to forgotten_ts, to the end of the run when that is null).  A
-- pod counts once: its assumption stops mattering once its claim on that node is in the view.
-- The truth a scheduler is compared with counts its assumption too until the attempt's write
-- commits (or fails), because a decision in flight is not watch delay: an ideal watcher with no
-- delay would hold the same assumption.  Changes at the same instant take effect together, so no
-- interval has zero length and a pipeline without delay never differs from the truth.  A watcher
-- applies a resource's writes mostly in commit order, but not always (its pods and nodes
-- informers are separate queues; a re-list applies its deltas in key order;
-- docs/run-directory.md): the windows below do not rely on it.
---------------------------------------------------------------------------------------------------

-- run_bounds: run, start_ts, end_ts: the first and the last timestamp anywhere in the run.  A
-- window still open at the end of the run ends at end_ts.
CREATE OR REPLACE VIEW run_bounds AS
SELECT run, min(first_ts) AS start_ts, max(last_ts) AS end_ts
FROM (
    SELECT run, min(commit_ts) AS first_ts, max(commit_ts) AS last_ts FROM events GROUP BY run
    UNION ALL
    SELECT run, NULL, max(applied_ts) FROM deliveries GROUP BY run
    UNION ALL
    SELECT run,
           min(least(enqueued_ts, started_ts, decided_ts, committed_ts)),
           max(greatest(decided_ts, committed_ts, forgotten_ts))
    FROM attempts
    GROUP BY run
)
GROUP BY run;

-- run_buckets: run, minute: the start (UTC) of every bucket of each run (bucket_of), from the
-- bucket of its first timestamp to that of its last, within from_ts and to_ts when they are set:
-- the rows of the minute-by-minute queries, so that a bucket without windows is a row of zeros,
-- not a gap.
CREATE OR REPLACE VIEW run_buckets AS
SELECT run, unnest(generate_series(
           bucket_of(greatest(start_ts, getvariable('from_ts')::TIMESTAMPTZ)),
           least(end_ts, getvariable('to_ts')::TIMESTAMPTZ - INTERVAL 1 MICROSECOND),
           to_minutes(bucket_minutes()))) AS minute
FROM run_bounds;

-- claims: run, rv, commit_ts, pod, life, node, takes, cpu_milli, memory_bytes, gpu_milli,
-- attempt_id, change, counts_assumed: one row per committed write that makes a pod take (takes)
-- or give back (NOT takes) its requests on a node in the truth.  A pod is one life of a name (a
-- name created again after its delete is a new pod; life 0: writes to a pod created before the
-- trace, whose requests are unknown: 0); its requests come from its create.
--   * A pod takes its node at its first committed binding, or at its create if the create
--     names the node (a static pod's mirror pod, which its kubelet creates already placed; its
--     change is 'binding' too), and gives it back at the first status write that sets a
--     terminal phase (pod_state 'failed' or 'succeeded': the kubelet set status.phase, and every
--     cache drops terminal pods) or at its last committed delete.
--   * A Gödel scheduler's assume patch (pod_state 'assumed', naming the node) claims the node
--     for the caches that count assumed pods (Gödel's schedulers), until a rejection sets the
--     pod back to 'dispatched'; its binding on the same node then changes nothing.  Those
--     changes have counts_assumed true; the binding then is a change only for the caches that
--     count bound pods alone (counts_assumed false: Gödel's binder, kubelets); every other change
--     counts for every cache (counts_assumed null).  A run without assume patches has only
--     changes for every cache.
-- change says which write it is: 'binding', 'assumed', 'rejected', 'failed', 'succeeded' or
-- 'delete';
-- attempt_id is the attempt that wrote a claim (takes), null for a release.
CREATE OR REPLACE VIEW claims AS
WITH pod_writes AS (
    SELECT run, rv, commit_ts, concat_ws('/', namespace, name) AS pod, verb, subresource, node,
           pod_state, attempt_id, cpu_milli, memory_bytes, gpu_milli,
           verb = 'create' AND subresource IS NULL AS creates,
           count(*) FILTER (verb = 'create' AND subresource IS NULL)
               OVER (PARTITION BY run, namespace, name ORDER BY rv) AS life
    FROM events
    WHERE resource = 'pods' AND name <> ''
), lives AS (
    SELECT run, pod, life,
           coalesce(any_value(cpu_milli) FILTER (creates), 0) AS cpu_milli,
           coalesce(any_value(memory_bytes) FILTER (creates), 0) AS memory_bytes,
           coalesce(any_value(gpu_milli) FILTER (creates), 0) AS gpu_milli,
           min(rv) FILTER (verb = 'create' AND (subresource = 'binding'
                                                OR (creates AND node IS NOT NULL))) AS bind_rv,
           max(rv) FILTER (verb = 'delete' AND subresource IS NULL) AS delete_rv
    FROM pod_writes
    GROUP BY run, pod, life
), steps AS (
    -- the writes that can move a pod, and the node it holds after each (null: none)
    SELECT pod_writes.run, pod_writes.rv, pod_writes.commit_ts, pod_writes.pod, pod_writes.life,
           pod_writes.attempt_id, lives.cpu_milli, lives.memory_bytes, lives.gpu_milli,
           CASE WHEN pod_writes.rv = lives.bind_rv THEN 'binding'
                WHEN pod_writes.rv = lives.delete_rv THEN 'delete'
                WHEN pod_state = 'assumed' THEN 'assumed'
                WHEN pod_state = 'dispatched' THEN 'rejected'
                ELSE pod_state END AS change,
           CASE WHEN pod_writes.rv = lives.bind_rv OR pod_state = 'assumed'
                THEN pod_writes.node END AS holds,
           pod_writes.rv = lives.bind_rv OR pod_writes.rv = lives.delete_rv
               OR pod_state IN ('failed', 'succeeded') AS moves_bound
    FROM pod_writes
    JOIN lives USING (run, pod, life)
    WHERE pod_writes.rv = lives.bind_rv OR pod_writes.rv = lives.delete_rv
       OR pod_state IN ('assumed', 'dispatched', 'failed', 'succeeded')
), counted AS (
    -- each step with the node held before it, as caches that count assumed pods see it (true)
    -- and as those that count bound pods alone see it (false)
    SELECT *, true AS counts_assumed,
           lag(holds) OVER (PARTITION BY run, pod, life ORDER BY rv) AS held
    FROM steps
    UNION ALL
    SELECT *, false, lag(holds) OVER (PARTITION BY run, pod, life ORDER BY rv)
    FROM steps
    WHERE moves_bound
), moves AS (
    SELECT run, rv, commit_ts, pod, life, held AS node, false AS takes, cpu_milli, memory_bytes,
           gpu_milli, NULL::BIGINT AS attempt_id, change, counts_assumed
    FROM counted
    WHERE held IS NOT NULL AND holds IS DISTINCT FROM held
    UNION ALL
    SELECT run, rv, commit_ts, pod, life, holds, true, cpu_milli, memory_bytes, gpu_milli,
           attempt_id, change, counts_assumed
    FROM counted
    WHERE holds IS NOT NULL AND holds IS DISTINCT FROM held
)
-- a move both kinds of cache see is one row, for every cache
SELECT run, rv, commit_ts, pod, life, node, takes, cpu_milli, memory_bytes, gpu_milli,
       attempt_id, change,
       CASE WHEN count(*) = 1 THEN any_value(counts_assumed) END AS counts_assumed
FROM moves
GROUP BY ALL;

-- node_capacity_changes: the rows of capacity_changes (below) that node writes make (change
-- 'node'), a view of their own so that `replay check` reads them without computing the claims.
--
-- capacity_changes: run, rv, commit_ts, node, cpu_milli, memory_bytes, gpu_milli, attempt_id, pod,
-- change, counts_assumed: every committed write that changes a node's free capacity, and by how
-- much (negative: less free); change says what it is ('node', or a claim's change), pod which pod
-- it moves, counts_assumed for which caches (claims).
--   * A node write carrying cpu_milli, memory_bytes or gpu_milli sets that allocatable (a value
--     the write does not carry keeps its last one); a node delete removes the node (allocatable
--     0), and a node created again starts from nothing.  Unknown allocatable counts as 0.
--   * A pod that requests something takes and gives back its requests as claims says;
--     attempt_id is the attempt that wrote a claim.
CREATE OR REPLACE VIEW node_capacity_changes AS
WITH node_writes AS (
    SELECT run, rv, commit_ts, name AS node, verb = 'delete' AS removes,
           cpu_milli, memory_bytes, gpu_milli
    FROM events
    WHERE resource = 'nodes'
      AND (verb = 'delete' OR coalesce(cpu_milli, memory_bytes, gpu_milli) IS NOT NULL)
), node_lives AS (
    -- how many times the node was deleted before this write: a new life starts after a delete
    SELECT *,
           count(*) FILTER (removes) OVER (
               PARTITION BY run, node ORDER BY rv
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS life
    FROM node_writes
), allocatable AS (
    SELECT run, rv, commit_ts, node,
           CASE WHEN removes THEN 0
                ELSE coalesce(last_value(cpu_milli IGNORE NULLS) OVER same_life, 0) END AS cpu_milli,
           CASE WHEN removes THEN 0
                ELSE coalesce(last_value(memory_bytes IGNORE NULLS) OVER same_life, 0) END AS memory_bytes,
           CASE WHEN removes THEN 0
                ELSE coalesce(last_value(gpu_milli IGNORE NULLS) OVER same_life, 0) END AS gpu_milli
    FROM node_lives
    WINDOW same_life AS (PARTITION BY run, node, life ORDER BY rv ROWS UNBOUNDED PRECEDING)
), node_changes AS (
    SELECT run, rv, commit_ts, node,
           cpu_milli - lag(cpu_milli, 1, 0) OVER by_node AS cpu_milli,
           memory_bytes - lag(memory_bytes, 1, 0) OVER by_node AS memory_bytes,
           gpu_milli - lag(gpu_milli, 1, 0) OVER by_node AS gpu_milli,
           NULL::BIGINT AS attempt_id, NULL AS pod, 'node' AS change,
           NULL::BOOLEAN AS counts_assumed
    FROM allocatable
    WINDOW by_node AS (PARTITION BY run, node ORDER BY rv)
)
SELECT *
FROM node_changes
WHERE cpu_milli <> 0 OR memory_bytes <> 0 OR gpu_milli <> 0;

CREATE OR REPLACE VIEW capacity_changes AS
SELECT run, rv, commit_ts, node,
       CASE WHEN takes THEN -cpu_milli ELSE cpu_milli END AS cpu_milli,
       CASE WHEN takes THEN -memory_bytes ELSE memory_bytes END AS memory_bytes,
       CASE WHEN takes THEN -gpu_milli ELSE gpu_milli END AS gpu_milli,
       attempt_id, pod, change, counts_assumed
FROM claims
WHERE cpu_milli <> 0 OR memory_bytes <> 0 OR gpu_milli <> 0
UNION ALL
FROM node_capacity_changes;

-- core_ns(gap_seconds): a cpu window's core-seconds as whole nano-core-seconds (a cpu gap is
-- whole millicores over whole microseconds), which add up the same whatever order DuckDB's
-- threads add them in, as doubles do not.  HUGEINT: a window of a large node open for years
-- holds more than BIGINT's 9.2e9 core-seconds.
CREATE OR REPLACE MACRO core_ns(gap_seconds) AS round(gap_seconds * 1e9)::HUGEINT;

-- core_seconds(gap_seconds, condition): an aggregate: the sum of gap_seconds over the rows
-- where condition holds, 0 if none, added as core_ns.
CREATE OR REPLACE MACRO core_seconds(gap_seconds, condition) AS
    coalesce(sum(core_ns(gap_seconds)) FILTER (condition), 0) / 1e9;

-- capacity_viewers: run, watcher, node, counts_assumed: the watchers that have a view of free
-- capacity: those that watch both pods and nodes.  node is the only node a node-bound watcher (a
-- kubelet) sees; null means every node.  counts_assumed: the watcher's cache counts pods assumed
-- by Gödel schedulers (a scheduler's; Gödel's binder counts bound pods and its own assumptions
-- only, a kubelet the pods bound to its node).
CREATE OR REPLACE VIEW capacity_viewers AS
SELECT run, watcher, node, role = 'scheduler' AS counts_assumed
FROM watchers
WHERE list_has_all(string_split(resources, ','), ['pods', 'nodes']);

-- unit_size(resource): how many of the trace's units make one core (cpu_milli), GiB
-- (memory_bytes) or GPU (gpu_milli), the units in which the capacity queries report.
CREATE OR REPLACE MACRO unit_size(resource) AS
    CASE resource WHEN 'cpu' THEN 1000.0 WHEN 'memory' THEN 1073741824.0 ELSE 1000.0 END;


---------------------------------------------------------------------------------------------------
-- Derived tables: computed from the tables above by the files of derived/, which read only what
-- comes before this section (the tables are not there yet when they run)
---------------------------------------------------------------------------------------------------

-- capacity_windows: run, then the model and its parameters, watcher, node, resource, kind,
-- start_ts, end_ts, open_at_end, gap_max, gap_seconds, wasted, conflicts: every interval during
-- which a watcher's view of a node's free capacity of one resource differed from the truth, stale
-- or phantom.  A table of the run directory, derived from the tables above by `replay run` with
-- derived/capacity_windows.sql, whose header defines every column.
CREATE OR REPLACE VIEW capacity_windows AS FROM run_table('capacity_windows');

-- stored_rows(table_name): the rows of a table of every run, each preceded by its run's name
-- (run), in order: the runs by name, then each run's rows in the order its file stores them (for
-- capacity_windows: by watcher, node, resource and start_ts, derived/capacity_windows.sql).
-- The order is DuckDB's order preservation (docs: SQL dialect, order preservation): the rows of
-- one table, which read_parquet makes of the files in the order listed (here sorted by run name),
-- keep their order through WHERE and SELECT, unless preserve_insertion_order is set to false
-- (replay's connections set it true, and lock it).  So a query that selects from this and only
-- filters and projects needs no ORDER BY; one that joins or groups does.  Sorting the 21M
-- windows of two 1M-pod runs back into this order took three quarters of stale_capacity_windows'
-- time (11.3 s of it, against 2.9 s).  (struct_extract, not file.path: DuckDB reads a column
-- reference among a table function's arguments as the string 'file.path'.)
CREATE OR REPLACE MACRO stored_rows(table_name) AS TABLE
SELECT parse_path(filename)[-2] AS run, * EXCLUDE (filename)
FROM read_parquet(
    [struct_extract(file, 'path')
     FOR file IN list_sort([{'run': parse_path(path)[-2], 'path': path}
                            FOR path IN table_paths(table_name)])],
    filename = true);

-- capacity_summary(per_role): the windows of each watcher with a view of capacity summarised
-- (stale_capacity_summary.sql defines the columns), one row per run and watcher, or with
-- per_role one per run and watcher_role whose watcher is 'ALL', or with per_role NULL the rows
-- of both.  All add watcher_role, watchers (how many watchers the row sums), one_node (every
-- one of them sees one node only, as a kubelet does) and per_role (which kind of row it is).
-- Reads the parameters from_ts, to_ts and watcher.
-- How: one pass over the windows summarises each watcher's of each kind (grouping by kind
-- rather than filtering ten aggregates by it); a role's counts, sums and maxima are those of its
-- watchers', and only its percentiles need a second pass, over the windows again (they are read
-- twice rather than kept: keeping 17M windows of a 1M-pod run cost more than reading them).
-- Duplicating each window for its watcher's row and its role's, as this macro once did, took
-- 1.6 times as long on two 1M-pod runs.
CREATE OR REPLACE MACRO capacity_summary(per_role) AS TABLE
WITH viewers AS (
    SELECT viewers.run, viewers.watcher, viewers.node, watchers.role AS watcher_role
    FROM capacity_viewers AS viewers
    JOIN watchers USING (run, watcher)
    WHERE watcher_selected(viewers.watcher)
), rows AS (
    -- the rows, from the viewers alone (a row whose watchers had no window is a row of zeros)
    SELECT run, watcher_role, per_role_row,
           CASE WHEN per_role_row THEN 'ALL' ELSE watcher END AS row_watcher,
           count(DISTINCT watcher) AS watchers,
           bool_and(node IS NOT NULL) AS one_node
    FROM (SELECT *,
                 unnest(CASE WHEN per_role IS NULL THEN [false, true] ELSE [per_role] END)
                     AS per_role_row
          FROM viewers)
    GROUP BY ALL
), windows AS NOT MATERIALIZED (
    SELECT run, watcher, kind, resource, gap_seconds, ms_between(start_ts, end_ts) AS duration_ms,
           -- the windows whose core-seconds count twice: wasted (stale), conflicted (phantom)
           CASE kind WHEN 'stale' THEN wasted ELSE conflicts > 0 END AS counted
    FROM capacity_windows
    WHERE in_time_window(start_ts) AND watcher_selected(watcher)
), each_watcher AS (
    -- core-seconds as whole nano-core-seconds (core_ns, as core_seconds adds them), so that a
    -- role's are the sum of its watchers' exactly
    SELECT run, watcher, kind, count(*) AS windows,
           quantile_cont(duration_ms, [0.5, 0.99]) AS durations, max(duration_ms) AS max_ms,
           sum(core_ns(gap_seconds)) FILTER (resource = 'cpu') AS core_ns,
           sum(core_ns(gap_seconds)) FILTER (resource = 'cpu' AND counted)
               AS counted_core_ns
    FROM windows
    GROUP BY run, watcher, kind
), role_durations AS (
    SELECT run, watcher_role, kind, quantile_cont(duration_ms, [0.5, 0.99]) AS durations
    FROM windows
    JOIN viewers USING (run, watcher)
    WHERE per_role IS DISTINCT FROM false
    GROUP BY run, watcher_role, kind
), kinds AS (
    -- one row per row of the result and kind of window
    SELECT run, watcher_role, false AS per_role_row, watcher AS row_watcher, kind, windows,
           durations, max_ms, core_ns, counted_core_ns
    FROM each_watcher
    JOIN viewers USING (run, watcher)
    WHERE per_role IS NOT true
    UNION ALL
    SELECT run, watcher_role, true, 'ALL', kind, sum(windows)::BIGINT,
           any_value(role_durations.durations), max(max_ms), sum(core_ns), sum(counted_core_ns)
    FROM each_watcher
    JOIN viewers USING (run, watcher)
    JOIN role_durations USING (run, watcher_role, kind)
    GROUP BY run, watcher_role, kind
), summarised AS (
    SELECT run, watcher_role, per_role_row, row_watcher,
           any_value(windows) FILTER (kind = 'stale') AS windows,
           any_value(durations) FILTER (kind = 'stale') AS durations,
           any_value(max_ms) FILTER (kind = 'stale') AS max_ms,
           any_value(core_ns) FILTER (kind = 'stale') AS blind_core_ns,
           any_value(counted_core_ns) FILTER (kind = 'stale') AS wasted_core_ns,
           any_value(windows) FILTER (kind = 'phantom') AS phantom_windows,
           any_value(durations) FILTER (kind = 'phantom') AS phantom_durations,
           any_value(max_ms) FILTER (kind = 'phantom') AS phantom_max_ms,
           any_value(core_ns) FILTER (kind = 'phantom') AS phantom_core_ns,
           any_value(counted_core_ns) FILTER (kind = 'phantom') AS conflicted_core_ns
    FROM kinds
    GROUP BY ALL
)
SELECT run, watcher_role, row_watcher AS watcher, watchers, one_node,
       coalesce(windows, 0) AS windows,
       durations[1] AS p50_ms, durations[2] AS p99_ms, max_ms,
       coalesce(blind_core_ns, 0) / 1e9 AS blind_core_seconds,
       coalesce(wasted_core_ns, 0) / 1e9 AS wasted_core_seconds,
       coalesce(phantom_windows, 0) AS phantom_windows,
       phantom_durations[1] AS phantom_p50_ms, phantom_durations[2] AS phantom_p99_ms,
       phantom_max_ms,
       coalesce(phantom_core_ns, 0) / 1e9 AS phantom_core_seconds,
       coalesce(conflicted_core_ns, 0) / 1e9 AS conflicted_core_seconds,
       per_role_row AS per_role
FROM rows
LEFT JOIN summarised USING (run, watcher_role, per_role_row, row_watcher);
