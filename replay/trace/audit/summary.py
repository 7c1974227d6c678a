"""What an ingest read, kept and dropped, counted per block and added up."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields


@dataclass
class Summary:
    """What an ingest read and kept; ``lines`` prints it for people."""

    events: int = 0
    rows: int = 0
    by_verb_resource: Counter = field(default_factory=Counter)
    skipped_stages: Counter = field(default_factory=Counter)
    reads: int = 0
    other_verbs: int = 0
    dropped: Counter = field(default_factory=Counter)  # valid writes that make no row, by reason
    duplicates: int = 0
    collections: int = 0  # pod deletecollections, written as the deletes they made
    collected: int = 0
    lacking_bodies: Counter = field(default_factory=Counter)  # by (verb, resource)
    bad_lines: int = 0
    first_bad: str | None = None

    def add(self, other: Summary) -> None:
        """Add the counts of ``other`` (a later block) to these."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "first_bad":
                self.first_bad = mine or theirs
            else:
                setattr(self, f.name, mine + theirs)

    def lines(self) -> list[str]:
        """The summary, one fact per line, largest counts first."""
        out = [f"events read: {self.events:,}", f"rows written: {self.rows:,}"]
        out += [f"  {verb} {resource}: {n:,}"
                for (verb, resource), n in sorted(self.by_verb_resource.items(),
                                                   key=lambda kv: (-kv[1], kv[0]))]
        stages = ", ".join(f"{stage} {n:,}" for stage, n in sorted(self.skipped_stages.items()))
        out.append(f"skipped stages: {stages or 'none'}")
        out.append(f"reads dropped: {self.reads:,}" + (" (keep them with --keep-reads)"
                                                       if self.reads else ""))
        if self.other_verbs:
            out.append(f"events with other verbs dropped: {self.other_verbs:,}")
        out += [f"dropped ({reason}): {n:,}" for reason, n in sorted(self.dropped.items())]
        if self.collections:
            out.append(f"pod deletecollections written as the deletes they made: "
                       f"{self.collections:,} ({self.collected:,} deletes)")
        out.append(f"duplicate events dropped: {self.duplicates:,}")
        lacking = ", ".join(f"{verb} {resource} {n:,}" for (verb, resource), n in
                            sorted(self.lacking_bodies.items(), key=lambda kv: (-kv[1], kv[0])))
        out.append(f"rows lacking the body they need (Metadata-level log): "
                   f"{self.lacking_bodies.total():,}" + (f" ({lacking})" if lacking else ""))
        if self.bad_lines:
            out.append(f"bad lines skipped: {self.bad_lines:,} (first: {self.first_bad})")
        return out
