"""What a run tells the user of its workers' cache faults (docs/runtime.md, "Faults"): packets
read from storage without caching because a node's cache disk was full, and cached copies that
failed their size or adler32 check (dropped, fetched again, never processed).

The master counts them from the packets' and moves' results, per node; the run's summary
gives them as notes and, for programs, as ``cache_faults`` (``--json``, ``summary.json``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CORRUPTED_NOTE", "READ_THROUGH_NOTE", "CacheFaults"]

READ_THROUGH_NOTE = "read from storage without caching (its cache disk was full)"
CORRUPTED_NOTE = "failed their size or adler32 check: dropped, fetched again, not processed"
SHOWN_URLS = 3
"""URLs a note names (the rest are counted)."""


@dataclass(slots=True)
class CacheFaults:
    """The per-node counts of a run (see the module docstring)."""

    read_through: dict[str, Counter[str]] = field(default_factory=dict)
    """node -> URL -> packets that read it where it is, the cache disk being full."""
    corrupted: dict[str, Counter[str]] = field(default_factory=dict)
    """node -> URL -> copies of it that failed their check there."""

    def packet(self, node: str, url: str, source: str, corrupted: list[str]) -> None:
        """A packet's result came back from ``node`` (``source`` ``direct``: read through)."""
        if source == "direct":
            self.read_through.setdefault(node, Counter())[url] += 1
        self.copies(node, corrupted)

    def copies(self, node: str, corrupted: list[str]) -> None:
        """Copies that failed their check on ``node`` (a packet's or a move's result)."""
        if corrupted:
            self.corrupted.setdefault(node, Counter()).update(corrupted)

    def notes(self) -> list[str]:
        """One line per node and kind of fault, e.g. ``node n1: 12 packets of 5 files read
        from storage without caching (its cache disk was full)``."""
        out = []
        for node in sorted(self.read_through):
            files = self.read_through[node]
            out.append(
                f"node {node}: {sum(files.values())} packets of {len(files)} files "
                f"{READ_THROUGH_NOTE}"
            )
        for node in sorted(self.corrupted):
            copies = self.corrupted[node]
            urls = sorted(copies)
            named = ", ".join(urls[:SHOWN_URLS])
            more = f" and {len(urls) - SHOWN_URLS} more" if len(urls) > SHOWN_URLS else ""
            out.append(
                f"node {node}: {sum(copies.values())} cached copies {CORRUPTED_NOTE}: {named}{more}"
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        """``{"read_through": {node: {"packets": n, "files": n}}, "corrupted": {node:
        {url: copies}}}``: empty mappings when nothing went wrong."""
        return {
            "read_through": {
                node: {"packets": sum(c.values()), "files": len(c)}
                for node, c in sorted(self.read_through.items())
            },
            "corrupted": {
                node: dict(sorted(c.items())) for node, c in sorted(self.corrupted.items())
            },
        }
