"""The study of ganis et al. (PROOF): the packetizers' uneven-data experiment
and the group quotas, in the simulator and on a local Dask cluster (docs/proof.md)."""

from __future__ import annotations

__all__: list[str] = []
