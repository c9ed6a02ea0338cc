"""PROOF's pull scheduling (ganis et al.): the packetizers, as policies, and
the group priorities (docs/proof.md)."""

from __future__ import annotations

__all__: list[str] = []
