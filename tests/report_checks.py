"""Checks the report's tests share: every number on a page is its query's answer."""

from __future__ import annotations

import re

import polars as pl

from replay.analysis.catalog import load_query
from replay.analysis.runs import PARAMETERS, open_runs, run_query

SOURCE = re.compile(r"^(\w+) \((.*)\): (\w+)$")


class QueryAnswers:
    """The shipped queries' answers over some runs, each query run once."""

    def __init__(self, run_dirs, **variables):
        self.con = open_runs([str(d) for d in run_dirs])
        self.variables = {name: None for name in PARAMETERS} | variables
        self.answers: dict[str, pl.DataFrame] = {}

    def answer(self, name: str) -> pl.DataFrame:
        if name not in self.answers:
            self.answers[name] = run_query(self.con, load_query(name), self.variables).pl()
        return self.answers[name]

    def value(self, source: str):
        """The number a cell's source names: ``query (run=..., key=value, ...): column``."""
        found = SOURCE.match(source)
        assert found, source
        name, keys, column = found.groups()
        rows = self.answer(name)
        for pair in keys.split(", "):
            key, _, wanted = pair.partition("=")
            rows = rows.filter(pl.col(key).cast(pl.String) == wanted)
        assert rows.height == 1, (source, rows)
        return rows[column][0]


def same_number(shown, expected) -> bool:
    """A cell's exact value (its repr) against the query's."""
    if expected is None:
        return shown in (None, "")
    return type(expected)(shown) == expected if isinstance(shown, str) else shown == expected
