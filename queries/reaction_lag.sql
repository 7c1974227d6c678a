-- reaction_lag: how long each component took to react to the write that prompts it, measured in
-- a recorded trace, next to the model's watch delay of those writes to that component.
--
-- A reaction is a trigger write and the first write of one component that answers it, for the
-- same pod (or, for controllers, the same owner).  Its lag is the component's watch delay of the
-- trigger plus its queueing and processing: an upper bound of the watch delay.  So a lag below
-- the model's delay for the same writes says the model's pipeline is too slow for this cluster;
-- a lag far above it is the component's own work.  Kinds of reaction (a pod is namespace/name, and
-- a create starts a new incarnation of the name; only writes with a name count, so pods created
-- with generateName in a Metadata-level log, whose names the log does not record, have none):
--   <scheduler>          pod create -> binding request: the pod's create commits, its first
--                        binding request arrives (attempts.decided_ts), committed or not; for any
--                        component that writes bindings but godel-binder
--   kubelet              binding -> first pod status write: a committed binding, the first
--                        pods/status write by a kubelet after it (only the node's own kubelet may
--                        write it; where both writes name a node they must agree)
--   godel-dispatcher     pod create -> dispatch patch (its first update or patch of the pod)
--   godel-scheduler      dispatch patch -> assume patch
--   godel-binder         assume patch -> binding request (attempts.decided_ts)
--   controller-manager   <kind> write -> <replicaset write | pod create>: a create, update or
--                        patch of a deployment (or its scale) and the controller-manager's first
--                        write of a replicaset named after it (NAME-<hash>); of a replicaset,
--                        statefulset, daemonset or job and its first create of a pod named after
--                        it (NAME-<suffix>)
-- A reaction's trigger is the latest trigger write before the answer (or at the same instant; of
-- several at one instant, the latest resource version); each trigger counts once, with its first
-- answer.  The answer's time is its commit except for binding requests (their
-- arrival), so a lag also holds that answer's own request latency.
--
-- One row per run, component and reaction:
--   run                the run directory's name
--   component          the component that reacted (trace.component)
--   reaction           trigger -> answer, as above
--   reactions          how many were measured
--   p50_ms, p90_ms, p99_ms, max_ms
--                      the lag, milliseconds (percentiles interpolated linearly)
--   watcher_role       the role of the reacting component's watcher (null for controllers)
--   model_basis        what the model_ columns describe: 'same writes' (the deliveries of the
--                      triggers to the reacting watcher: the component's own watcher, kubelet/NODE
--                      for a kubelet), else 'role' (every delivery to watchers of watcher_role:
--                      e.g. kubelets when a Metadata-level log does not say where a pod was bound,
--                      so that no kubelet watcher receives it); null when neither exists
--   model_deliveries   the deliveries described
--   model_p50_ms, model_p90_ms, model_p99_ms, model_max_ms
--                      their end-to-end watch delay (commit to applied), milliseconds
--
-- Parameters: from_ts, to_ts select reactions by their trigger's commit_ts; watcher selects them
-- by the reacting watcher's name (the component, or kubelet/NODE).
WITH pod_steps AS (
    -- committed pod writes that start or answer a reaction
    SELECT run, rv, commit_ts AS at_ts, concat_ws('/', namespace, name) AS pod, node, component,
           CASE
               WHEN verb = 'create' AND subresource IS NULL THEN 'create'
               WHEN verb = 'create' AND subresource = 'binding' THEN 'binding'
               WHEN subresource = 'status' AND component = 'kubelet' THEN 'kubelet_status'
               WHEN subresource IS NULL AND verb IN ('update', 'patch')
                    AND component = 'godel-dispatcher' THEN 'dispatch'
               WHEN subresource IS NULL AND verb IN ('update', 'patch')
                    AND component = 'godel-scheduler' THEN 'assume'
           END AS step
    FROM events
    WHERE resource = 'pods' AND name <> ''
), steps AS (
    SELECT * FROM pod_steps WHERE step IS NOT NULL
    UNION ALL BY NAME
    -- every binding request, committed or not, when it arrived
    SELECT run, NULL::BIGINT AS rv, decided_ts AS at_ts, pod, node, scheduler AS component,
           CASE WHEN scheduler = 'godel-binder' THEN 'binder_request' ELSE 'binding_request' END
               AS step
    FROM attempts
), tracked AS (
    -- each step with what its pod went through up to the same instant: its latest create (the
    -- incarnation the step belongs to) and its latest step of each kind that triggers a
    -- reaction, each as a write_key (views.sql: a maximum of integers costs the window much less
    -- than the same maximum of structs; rv is unique, so the node never broke a tie), and the
    -- node of the latest binding.  One sort of the steps serves all of them: matching answers
    -- to triggers with an ASOF join, and the incarnations with a window of their own, sorted
    -- the steps by their pod's name three times
    SELECT *,
           max(write_key(at_ts, rv)) FILTER (step = 'create') OVER upto AS last_create,
           max(write_key(at_ts, rv)) FILTER (step = 'binding') OVER upto AS last_binding,
           arg_max_null(node, write_key(at_ts, rv)) FILTER (step = 'binding') OVER upto
               AS last_binding_node,
           max(write_key(at_ts, rv)) FILTER (step = 'dispatch') OVER upto AS last_dispatch,
           max(write_key(at_ts, rv)) FILTER (step = 'assume') OVER upto AS last_assume
    FROM steps
    WINDOW upto AS (PARTITION BY run, pod ORDER BY at_ts
                    RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
), rules(rule, trigger_step, answer_step, reaction, watcher_role) AS (
    VALUES (1, 'create', 'binding_request', 'pod create -> binding request', 'scheduler'),
           (2, 'binding', 'kubelet_status', 'binding -> first pod status write', 'kubelet'),
           (3, 'create', 'dispatch', 'pod create -> dispatch patch', 'dispatcher'),
           (4, 'dispatch', 'assume', 'dispatch patch -> assume patch', 'scheduler'),
           (5, 'assume', 'binder_request', 'assume patch -> binding request', 'binder')
), pod_answers AS (
    -- each answer with its trigger: the latest trigger step of its pod up to the answer, if it
    -- belongs to the answer's incarnation (no create came between them)
    SELECT tracked.*, rules.*,
           CASE trigger_step WHEN 'create' THEN last_create WHEN 'binding' THEN last_binding
                WHEN 'dispatch' THEN last_dispatch WHEN 'assume' THEN last_assume END AS trigger,
           CASE WHEN rule = 2 THEN last_binding_node END AS trigger_node
    FROM tracked
    JOIN rules ON step = answer_step
    WHERE at_ts IS NOT NULL
), first_answers AS (
    -- each trigger with its first answer per component, grouped by the rule's number rather than
    -- its reaction's and role's names (7% less CPU time on the 1M-pod what-if run), which only
    -- the few rows of lags get (kinds)
    SELECT run, component, rule,
           CASE WHEN rule = 2 THEN 'kubelet/' || coalesce(trigger_node, node) ELSE component END
               AS watcher,
           trigger, min(at_ts) AS answer_ts
    FROM pod_answers
    WHERE trigger IS NOT NULL
      AND (last_create IS NULL OR write_key_us(trigger) >= write_key_us(last_create))
      AND (rule <> 2 OR trigger_node IS NULL OR node IS NULL OR trigger_node = node)
    GROUP BY ALL
), pod_pairs AS (
    SELECT run, component, rule AS kind, watcher, write_key_rv(trigger) AS trigger_rv,
           make_timestamptz(write_key_us(trigger)) AS trigger_ts, answer_ts
    FROM first_answers
), owner_triggers AS (
    -- writes of a controller's owner object that change what it wants.  (resource <> 'pods'
    -- says nothing new, but DuckDB filters by it as it reads, where it reads an IN list only
    -- to skip whole row groups: the 1M-pod what-if run's scan hands on 20,000 rows, not 4M.)
    SELECT run, rv, commit_ts AS at_ts, namespace, name AS owner, resource AS owner_resource
    FROM events
    WHERE resource IN ('deployments', 'replicasets', 'statefulsets', 'daemonsets', 'jobs')
      AND resource <> 'pods'
      AND verb IN ('create', 'update', 'patch') AND coalesce(subresource, 'scale') = 'scale'
), owner_kinds(kind, answer_resource, owner_resource, reaction) AS (
    VALUES (6, 'replicasets', 'deployments', 'deployment write -> replicaset write'),
           (7, 'pods', 'replicasets', 'replicaset write -> pod create'),
           (8, 'pods', 'statefulsets', 'statefulset write -> pod create'),
           (9, 'pods', 'daemonsets', 'daemonset write -> pod create'),
           (10, 'pods', 'jobs', 'job write -> pod create')
), kinds AS (
    -- every kind of reaction by its number (the pods' rules, then the owners'), with its name and
    -- its watchers' role: the reactions carry the number through their join with the deliveries
    -- and their groupings, and lags joins the names to its few rows (the names carried instead
    -- cost the 1M-pod what-if run 5% more CPU time)
    SELECT rule AS kind, reaction, watcher_role FROM rules
    UNION ALL
    SELECT kind, reaction, NULL FROM owner_kinds
), owner_answers AS (
    -- the controller-manager's writes named after an owner: NAME-<suffix>
    SELECT run, commit_ts AS at_ts, namespace, regexp_extract(name, '^(.+)-[^-]+$', 1) AS owner,
           owner_resource, kind
    FROM events
    JOIN owner_kinds ON answer_resource = resource
    WHERE component = 'controller-manager' AND subresource IS NULL AND name LIKE '%-%'
      AND verb IN ('create', 'update', 'patch') AND (resource <> 'pods' OR verb = 'create')
), owner_pairs AS (
    SELECT a.run, 'controller-manager' AS component,
           a.kind, 'controller-manager' AS watcher,
           t.rv AS trigger_rv, t.at_ts AS trigger_ts, min(a.at_ts) AS answer_ts
    FROM owner_answers AS a
    ASOF JOIN owner_triggers AS t
        ON a.run = t.run AND a.owner_resource = t.owner_resource
           AND coalesce(a.namespace, '') = coalesce(t.namespace, '') AND a.owner = t.owner
           AND a.at_ts >= t.at_ts
    GROUP BY ALL
), reactions AS (
    SELECT *, ms_between(trigger_ts, answer_ts) AS lag_ms
    FROM (FROM pod_pairs UNION ALL BY NAME FROM owner_pairs)
    WHERE in_time_window(trigger_ts) AND watcher_selected(coalesce(watcher, component))
), lags AS (
    SELECT l.*, reaction, watcher_role
    FROM (SELECT run, component, kind, count(*) AS reactions,
                 quantile_cont(lag_ms, [0.5, 0.9, 0.99]) AS lag, max(lag_ms) AS max_ms
          FROM reactions
          GROUP BY run, component, kind) AS l
    JOIN kinds USING (kind)
), same_writes AS (
    SELECT r.run, r.component, r.kind, count(*) AS deliveries,
           quantile_cont(ms_between(d.commit_ts, d.applied_ts), [0.5, 0.9, 0.99]) AS delay,
           max(ms_between(d.commit_ts, d.applied_ts)) AS max_ms
    FROM reactions AS r
    JOIN deliveries AS d ON d.run = r.run AND d.rv = r.trigger_rv AND d.watcher = r.watcher
    GROUP BY r.run, r.component, r.kind
), undelivered AS (
    -- the roles whose reactions' triggers the model never delivered to the reacting watcher
    SELECT DISTINCT l.run, l.watcher_role
    FROM lags AS l
    ANTI JOIN same_writes AS s
        ON s.run = l.run AND s.component = l.component AND s.kind = l.kind
), roles AS (
    SELECT d.run, d.watcher_role, count(*) AS deliveries,
           quantile_cont(d.end_to_end, [0.5, 0.9, 0.99]) AS delay, max(d.end_to_end) AS max_ms
    FROM delivery_delays AS d
    SEMI JOIN undelivered AS u ON u.run = d.run AND u.watcher_role = d.watcher_role
    GROUP BY d.run, d.watcher_role
)
SELECT l.run, l.component, l.reaction, l.reactions,
       l.lag[1] AS p50_ms, l.lag[2] AS p90_ms, l.lag[3] AS p99_ms, l.max_ms,
       l.watcher_role,
       CASE WHEN s.deliveries IS NOT NULL THEN 'same writes'
            WHEN o.deliveries IS NOT NULL THEN 'role' END AS model_basis,
       coalesce(s.deliveries, o.deliveries, 0) AS model_deliveries,
       coalesce(s.delay, o.delay)[1] AS model_p50_ms,
       coalesce(s.delay, o.delay)[2] AS model_p90_ms,
       coalesce(s.delay, o.delay)[3] AS model_p99_ms,
       coalesce(s.max_ms, o.max_ms) AS model_max_ms
FROM lags AS l
LEFT JOIN same_writes AS s
    ON s.run = l.run AND s.component = l.component AND s.kind = l.kind
LEFT JOIN roles AS o ON s.deliveries IS NULL AND o.run = l.run AND o.watcher_role = l.watcher_role
ORDER BY l.run, l.component, l.reaction;
