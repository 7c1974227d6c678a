"""The object a request addresses, read from its ``requestURI`` when the event has no ``objectRef``.

Follows the API server's own parsing (``k8s.io/apiserver/pkg/endpoints/request.RequestInfoFactory``):
``/api/v1[/namespaces/NS]/RESOURCE[/NAME[/SUBRESOURCE]]`` and the same under
``/apis/GROUP/VERSION``; ``status`` and ``finalize`` after ``/namespaces/NAME`` are subresources of
the namespace itself.  Any other path is a non-resource request (``/healthz``, ``/metrics``).
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import parse_qsl

NAMESPACE_SUBRESOURCES = ("status", "finalize")
# The API groups the API server serves itself (its REST storage providers,
# ``pkg/controlplane/instance.go``, with the CRD and aggregator servers' own): a resource of any
# other group (a CRD such as Longhorn's ``nodes.longhorn.io``, an aggregated API such as
# ``metrics.k8s.io``'s ``pods``) is named ``RESOURCE.GROUP``, as kubectl names it, so that it is
# never taken for the core resource of the same plural.
BUILT_IN_GROUPS = frozenset({
    "", "admissionregistration.k8s.io", "apiextensions.k8s.io", "apiregistration.k8s.io", "apps",
    "authentication.k8s.io", "authorization.k8s.io", "autoscaling", "batch",
    "certificates.k8s.io", "coordination.k8s.io", "discovery.k8s.io", "events.k8s.io",
    "extensions", "flowcontrol.apiserver.k8s.io", "internal.apiserver.k8s.io",
    "networking.k8s.io", "node.k8s.io", "policy", "rbac.authorization.k8s.io", "resource.k8s.io",
    "scheduling.k8s.io", "storage.k8s.io", "storagemigration.k8s.io"})


class Target(NamedTuple):
    resource: str
    namespace: str | None
    name: str
    subresource: str | None


def qualified(resource: str, group: str | None) -> str:
    """``resource`` as the trace names it: ``RESOURCE.GROUP`` unless the group is built in."""
    return resource if not group or group in BUILT_IN_GROUPS else f"{resource}.{group}"


def parse_request_uri(uri: str) -> Target | None:
    """The resource, namespace, name and subresource in ``uri``; None for non-resource paths."""
    parts = [p for p in uri.partition("?")[0].split("/") if p]
    group = None
    if len(parts) >= 3 and parts[0] == "api":
        parts = parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, parts = parts[1], parts[3:]
    else:
        return None
    namespace = None
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    padded: list[str | None] = [*parts, None, None]
    return Target(qualified(parts[0], group), namespace, padded[1] or "", padded[2])


def is_dry_run(uri: str | None) -> bool:
    """Whether the request asked to write nothing (``?dryRun=All``, as ``kubectl apply
    --dry-run=server`` sends): the API server admits and validates it and answers as if it had
    written, but stores nothing, so no watch sees it (``dryrun.IsDryRun`` in
    ``k8s.io/apiserver/pkg/endpoints/handlers``: any ``dryRun`` value; only ``All`` is valid)."""
    return "dryRun" in _parameters(uri)


def has_selector(uri: str | None) -> bool:
    """Whether the request selects objects by label or field (``labelSelector``,
    ``fieldSelector``, not empty)."""
    parameters = _parameters(uri)
    return bool(parameters.get("labelSelector") or parameters.get("fieldSelector"))


def _parameters(uri: str | None) -> dict[str, str]:
    """The query parameters of ``uri`` (the first value of each)."""
    if uri is None or "?" not in uri:  # the quick test, for most events
        return {}
    parameters: dict[str, str] = {}
    for name, value in parse_qsl(uri.partition("?")[2], keep_blank_values=True):
        parameters.setdefault(name, value)
    return parameters
