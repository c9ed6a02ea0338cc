"""The discrete-event simulator: engine, workloads, metrics and experiments."""

from __future__ import annotations

__all__: list[str] = []
