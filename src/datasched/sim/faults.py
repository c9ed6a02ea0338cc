"""Node faults of the simulated cluster: each node fails after an exponentially distributed
time and comes back, its cache empty, after a fixed repair time.

The failure times come from their own random stream (seeded), so a run with faults sees the
same jobs as the same run without them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["FaultError", "NodeFaults"]


class FaultError(ValueError):
    """A fault setting is out of range; ``field`` names it."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True, slots=True)
class NodeFaults:
    """Every node fails after an exponential time of mean ``mtbf_h`` hours (from its start or
    its last repair) and is back ``repair_h`` hours later, with an empty cache (a failed node
    is reinstalled)."""

    mtbf_h: float
    repair_h: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mtbf_h) and self.mtbf_h > 0):
            raise FaultError("node_mtbf_h", f"must be a positive number, got {self.mtbf_h!r}")
        if not (math.isfinite(self.repair_h) and self.repair_h >= 0):
            raise FaultError(
                "node_repair_h", f"must be zero or a positive number, got {self.repair_h!r}"
            )

    def stream(self) -> FaultStream:
        return FaultStream(self)


class FaultStream:
    """The failure times of one run (one random stream, drawn in the order asked)."""

    def __init__(self, faults: NodeFaults) -> None:
        self.faults = faults
        self._rng = np.random.default_rng([faults.seed, 0x4E0DE])

    def time_to_failure_s(self) -> float:
        return float(self._rng.exponential(self.faults.mtbf_h * 3600.0))

    @property
    def repair_s(self) -> float:
        return self.faults.repair_h * 3600.0
