"""The study of ponce-hersch: the FCFS and cache-oriented policies' figures and
claims (docs/reproduction-ponce.md)."""

from __future__ import annotations

__all__: list[str] = []
