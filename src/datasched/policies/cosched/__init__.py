"""Co-scheduling data movement with computation (romosan): the model and
books, the greedy policies and the min-cost-flow policy (docs/cosched.md)."""

from __future__ import annotations

__all__: list[str] = []
