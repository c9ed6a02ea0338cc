"""The study of romosan: co-scheduling data movement with computation
(docs/reproduction-romosan.md)."""

from __future__ import annotations

__all__: list[str] = []
