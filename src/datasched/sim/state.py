"""What the simulated engine's parts share: the engine's state, declared once for the mixins
that make up :class:`~datasched.sim.engine.SimEngine` (running subjobs, shared disks, shared
fetches), so each can be type-checked alone."""

from __future__ import annotations

import itertools
from typing import Any

from datasched.core.data import DataSpace
from datasched.core.model import CostModel, Job
from datasched.core.scheduler import Scheduler

__all__ = ["FINISH", "EngineState"]

FINISH = 1
"""The heap kind of a subjob's end (one number for every part of the engine)."""


class EngineState:
    """Attributes the engine sets up (see ``SimEngine.__init__``)."""

    scheduler: Scheduler
    space: DataSpace
    cost: CostModel
    now: float
    _runs: list[Any]
    """Slot -> the subjob running there, or None."""
    _heap: list[tuple[float, int, int, int, int]]
    _seq: itertools.count[int]
    _versions: itertools.count[int]
    _slot_node: list[int]
    """The scheduler's slot -> node map (the same list: it grows as nodes join)."""
    _jobs: dict[int, Job]
