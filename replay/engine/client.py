"""A component's API client: every write waits for the client's rate limiter before it is sent.

client-go throttles each client with a token bucket (``util/flowcontrol/throttle.go``:
``NewTokenBucketRateLimiter(qps, burst)``, over ``golang.org/x/time/rate``): the bucket starts
full with ``burst`` tokens and refills at ``qps`` tokens a second; a request takes a token, or
waits until the bucket has one, in the order the requests came.  Defaults differ per component:
kube-scheduler 50 QPS, burst 100 (``pkg/scheduler/apis/config/v1/defaults.go``); Gödel's
scheduler, binder and dispatcher 10,000 and 10,000.  Under a burst of decisions the
kube-scheduler's limit, not its decision time, bounds how fast it binds.

The wait delays the write's request, so its commit too; it is charged to the attempt the write
belongs to (the attempts table's ``throttled_ms``).  It is not a stage of the watch pipeline:
the write is not committed yet while it waits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from replay.engine.cluster import Attempt
from replay.engine.core import Environment


class TokenBucket:
    """x/time/rate's ``Limiter`` reserving one token per request; ``qps`` <= 0 never waits."""

    def __init__(self, qps: float, burst: int, now: int):
        self.qps, self.burst = qps, burst
        self._tokens = float(burst)
        self._last = now

    def reserve(self, now: int) -> int:
        """Take a token for a request made at ``now`` (µs): how long it waits for it (µs)."""
        if self.qps <= 0:
            return 0
        tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps / 1e6)
        tokens -= 1.0
        self._tokens, self._last = tokens, now
        return 0 if tokens >= 0 else math.ceil(-tokens / self.qps * 1e6)


class Client:
    """One component's client: a token bucket, then ``latency_us`` from request to commit."""

    def __init__(self, env: Environment, qps: float, burst: int, latency_us: int):
        self._env, self.latency_us = env, latency_us
        self.bucket = TokenBucket(qps, burst, env.now)

    def send(self, write: Callable[..., Any], *args: Any,
             for_attempts: Iterable[Attempt] = ()) -> None:
        """Request a write now: ``write(*args)`` runs (and commits it) once the rate limiter has
        let the request through and ``latency_us`` has passed; the wait is charged to the
        attempts the write is for.  (A request sent is not taken back: its timer is never
        cancelled, so it needs no ``Timer``.)"""
        wait = self.bucket.reserve(self._env.now)
        for attempt in for_attempts:
            attempt.throttled_us += wait
        self._env.call_at(self._env.now + wait + self.latency_us, write, *args)
