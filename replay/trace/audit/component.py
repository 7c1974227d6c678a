"""Which component wrote a request, from its user and user agent.

The ``component`` column lets an analysis ask "what did the schedulers write" without knowing each
cluster's service accounts.  Gödel's components are recognised by user agent alone, because they
may run under any service account; the Kubernetes control plane by its well-known users (and the
program name of its user agent, for clusters that give it other credentials).  Everyone else is a
``user``.
"""

from __future__ import annotations

import functools

# Program name at the start of the user agent -> component; checked first.
AGENT_PREFIXES = (
    ("godel-scheduler", "godel-scheduler"),
    ("godel-binder", "godel-binder"),
    ("godel-dispatcher", "godel-dispatcher"),
    ("kube-scheduler/", "kube-scheduler"),
    ("kube-controller-manager/", "controller-manager"),
    ("kubelet/", "kubelet"),
)
USERS = {
    "system:kube-scheduler": "kube-scheduler",
    "system:kube-controller-manager": "controller-manager",
}
NODE_USER_PREFIX = "system:node:"
KUBE_SYSTEM_ACCOUNT = "system:serviceaccount:kube-system:"
# Service accounts of kube-controller-manager's controllers (--use-service-account-credentials)
# whose names do not end in "-controller".
CONTROLLER_ACCOUNTS = frozenset({
    "bootstrap-signer", "generic-garbage-collector",
    "horizontal-pod-autoscaler", "legacy-service-account-token-cleaner",
    "persistent-volume-binder", "pod-garbage-collector", "root-ca-cert-publisher", "token-cleaner",
})


@functools.lru_cache(maxsize=1 << 16)
def component(user: str | None, user_agent: str | None) -> str:
    """The component that a request of ``user`` with ``user_agent`` comes from."""
    for prefix, name in AGENT_PREFIXES:
        if user_agent and user_agent.startswith(prefix):
            return name
    if not user:
        return "user"  # an empty string means no user too
    if user in USERS:
        return USERS[user]
    if user.startswith(NODE_USER_PREFIX):
        return "kubelet"
    if user.startswith(KUBE_SYSTEM_ACCOUNT):
        account = user[len(KUBE_SYSTEM_ACCOUNT):]
        if account.endswith("-controller") or account in CONTROLLER_ACCOUNTS:
            return "controller-manager"
    return "user"
