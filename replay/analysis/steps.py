"""A query of common table expressions (``WITH a AS (...), b AS (...) SELECT ...``) run one
expression at a time: each becomes a temporary table, dropped once nothing after it reads it.

Run whole, DuckDB keeps every materialised expression of a long query in memory until the query
ends, and inlines the others wherever they are read, computing them again each time: the
capacity windows of a 300k-pod run took 5.2 GB and 40 s of CPU that way, and 1.7 GB and 30 s one
step at a time.  A temporary table lives in DuckDB's buffer pool, so it spills to the
connection's ``temp_directory`` under its ``memory_limit`` like any other intermediate result.

The result is the query's: each expression is computed once, as a ``MATERIALIZED`` one is, and
later ones read it by the same name (a temporary table, like the expression, hides a view of
that name).  ``split_steps`` only cuts the text: a query it does not recognise (no leading
``WITH``, ``WITH RECURSIVE``, an expression with a column list) is returned as one step.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import duckdb

# Comments, quoted strings and identifiers, words, and single characters, in that order of
# precedence; whitespace between them is skipped.
_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>--[^\n]*|/\*.*?\*/)
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class Token:
    kind: str  # word, quoted, string or other
    text: str
    start: int
    end: int

    @property
    def name(self) -> str:
        """The identifier a word or a quoted identifier names, as DuckDB compares it."""
        return (self.text[1:-1].replace('""', '"') if self.kind == "quoted" else self.text).lower()


@dataclass(frozen=True)
class Step:
    name: str | None  # the expression's name; None for the final query
    sql: str
    reads: frozenset[str]  # every identifier it mentions (a superset of the names it reads)


def tokens(sql: str) -> list[Token]:
    return [Token(m.lastgroup or "other", m.group(), m.start(), m.end())
            for m in _TOKEN.finditer(sql) if m.lastgroup not in ("space", "comment")]


def split_steps(sql: str) -> list[Step]:
    """The query's expressions in order, then its final query; or the query alone, as one
    step, if it is not a plain ``WITH name AS [[NOT] MATERIALIZED] (...), ... query``."""
    toks = tokens(sql)
    steps: list[Step] = []
    if not toks or toks[0].text.upper() != "WITH":
        return [_step(None, sql, toks)]
    i = 1
    while True:
        name, body = _expression(toks, i)
        if name is None:
            return [_step(None, sql, toks)]
        steps.append(_step(name, sql[toks[body[0]].end:toks[body[1]].start],
                           toks[body[0] + 1:body[1]]))
        i = body[1] + 1
        if i < len(toks) and toks[i].text == ",":
            i += 1
            continue
        if i >= len(toks):
            return [_step(None, sql, toks)]
        steps.append(_step(None, sql[toks[i].start:], toks[i:]))
        return steps


def _expression(toks: list[Token], i: int) -> tuple[str | None, tuple[int, int]]:
    """At ``toks[i]``, ``name AS [[NOT] MATERIALIZED] (``: its name and the indices of its
    parentheses; (None, ...) if the tokens there are anything else."""
    words = [t.text.upper() for t in toks[i:i + 5]]
    if len(words) < 3 or toks[i].kind not in ("word", "quoted") or words[1] != "AS":
        return None, (0, 0)
    opening = i + 2 + next((n for n, skip in ((1, ["MATERIALIZED"]),
                                              (2, ["NOT", "MATERIALIZED"]))
                            if words[2:2 + n] == skip), 0)
    if opening >= len(toks) or toks[opening].text != "(":
        return None, (0, 0)
    depth = 0
    for j in range(opening, len(toks)):
        depth += {"(": 1, ")": -1}.get(toks[j].text, 0) if toks[j].kind == "other" else 0
        if depth == 0:
            return toks[i].name, (opening, j)
    return None, (0, 0)


def _step(name: str | None, sql: str, toks: list[Token]) -> Step:
    return Step(name, sql, frozenset(t.name for t in toks if t.kind in ("word", "quoted")))


def run_steps(con: duckdb.DuckDBPyConnection, steps: list[Step],
              done: Callable[[int], object] = lambda steps: None,
              replace: Callable[[str], bool] = lambda name: False) -> duckdb.DuckDBPyRelation:
    """Make each expression of ``steps`` a temporary table, dropping each as soon as no later
    step mentions it (``done(1)`` after each), and return the final query's relation (it runs
    when read; the tables it reads stay until the connection closes).

    ``replace(name)`` may compute an expression another way: it makes a temporary table or
    view of that name itself (dropped here after its last reader, as the step's own would be:
    a view of an object registered with ``con.register`` lets it go then), or decides that
    nothing will read it, and returns True; or returns False to let its SQL run."""
    last_read = {step.name: max(n for n, later in enumerate(steps) if step.name in later.reads
                                or later is step)
                 for step in steps if step.name is not None}
    replaced = set()
    for number, step in enumerate(steps[:-1]):
        if replace(step.name or ""):
            if not _is_temporary_table(con, step.name or ""):
                replaced.add(step.name)
        else:
            con.execute(f"CREATE TEMPORARY TABLE {_quote(step.name)} AS {step.sql}")
        for name, last in last_read.items():
            if last == number:
                kind = "VIEW IF EXISTS" if name in replaced else "TABLE"
                con.execute(f"DROP {kind} temp.{_quote(name)}")
        done(1)
    return con.sql(steps[-1].sql)


def _is_temporary_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?",
                            [name]).fetchall()[0][0])


def _quote(name: str | None) -> str:
    return '"' + (name or "").replace('"', '""') + '"'
