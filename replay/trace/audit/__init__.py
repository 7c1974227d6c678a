"""Kubernetes audit logs -> trace format v1 (``replay ingest``).

``reader`` streams lines out of plain, gzip or stdin input; ``event`` decodes a line into an audit
event (a small head first, the full event only for lines that become rows); ``row`` turns an event
into a row, with ``uri`` (the object a request URI names), ``body`` (pod requests, node allocatable,
binding targets) and ``component`` (who wrote it); ``order`` sorts and deduplicates the rows with
bounded memory; ``ingest`` drives it all and keeps the summary.
"""

from replay.trace.audit.ingest import Summary, ingest

__all__ = ["Summary", "ingest"]
