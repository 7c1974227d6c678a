"""Trace format v1: one Parquet file per trace, one row per API write.

``schema`` defines the columns, ``io`` reads and writes trace files, ``validate`` checks them, and
the producers (``synth``, ``audit``, ``importers``) turn workloads and recordings into traces.
"""
