"""The shipped queries: where their SQL files are, and reading a query by name or from a file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import replay
from replay.errors import ReplayError, unreadable

VIEWS = "views"
HEADLINE = ("per_component_delay", "conflict_rate", "stale_capacity_by_role")
# A headline query that leaves rows out (a kubelet per node), and the query with every row
HEADLINE_ALL_ROWS = {"stale_capacity_by_role": "stale_capacity_summary"}


@dataclass(frozen=True)
class Query:
    name: str  # the shipped name, or the file's path for a user's query
    sql: str


def queries_dir() -> Path:
    """``replay/queries`` when installed; the repository's ``queries/`` in an editable install."""
    installed = Path(replay.__file__).parent / "queries"
    return installed if installed.is_dir() else Path(replay.__file__).parent.parent / "queries"


def shipped() -> list[str]:
    """The names of the shipped queries, sorted."""
    return sorted(p.stem for p in queries_dir().glob("*.sql") if p.stem != VIEWS)


DERIVED_SECTION = "-- Derived tables:"


def views_sql(derived: bool = True) -> str:
    """``views.sql``; without its last section, the views of the derived tables, if not
    ``derived`` (to derive those tables)."""
    sql = (queries_dir() / f"{VIEWS}.sql").read_text(encoding="utf-8")
    return sql if derived else sql[:sql.index(DERIVED_SECTION)]


def load_query(spec: str) -> Query:
    """A shipped query by name, or the user's own ``FILE.sql``."""
    if spec.endswith(".sql"):
        path = Path(spec)
        try:
            return Query(spec, path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ReplayError(f"{spec}: no such query file") from None
        except (OSError, UnicodeDecodeError) as err:
            raise unreadable(spec, "query", err) from None
    if spec not in shipped():
        raise ReplayError(f"no query named {spec!r}; queries: {', '.join(shipped())}")
    return Query(spec, (queries_dir() / f"{spec}.sql").read_text(encoding="utf-8"))
