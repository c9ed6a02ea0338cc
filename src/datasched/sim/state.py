"""What the simulated engine's parts share: the engine's state, declared once for the parts
that make up :class:`~datasched.sim.engine.SimEngine`, so each can be type-checked alone.

The parts are one chain of bases, each with one base: ``EngineState`` <- ``DataMoves``
(sim/moves.py) <- ``MasterTurns`` (sim/master.py) <- ``SharedFetches`` (sim/fetches.py) <-
``SharedDisks`` (sim/disks.py) <- ``SubjobRuns`` (sim/subjobs.py) <- ``SimEngine``: the
order in which Python resolved their methods when they were mixins, so the same method wins
everywhere. One chain, because the compiled build makes the engine an extension type, which
takes one base; its fields are declared in ``state.pxd`` (docs/performance.md, "The hot path
compiled from its sources")."""

from __future__ import annotations

import itertools
from enum import IntEnum
from typing import Any

from datasched.core.data import DataSpace
from datasched.core.model import CostModel, Job
from datasched.core.scheduler import Scheduler

__all__ = ["FINISH", "MASTER_TURN", "SEGMENT", "EngineState", "Kind"]


class Kind(IntEnum):
    """What a heap entry of the simulated engine stands for: its third field, after the time
    and the sequence number; the two fields after it say which one (``a``, ``b``).

    The heap holds plain ints, and the hot path compares them with the module-level ints
    below (``FINISH``, ``SEGMENT``) or the engine's own: comparing with an enum member costs
    more than with an int, on every entry of every simulation.
    """

    ARRIVAL = 0
    """The next job of the run's list arrives (``a``: its index)."""
    FINISH = 1
    """A subjob's end (``a``: its slot, ``b``: the run's version; stale once re-timed)."""
    TICK = 2
    """A wake-up the policy asked for."""
    TRANSFER = 3
    """A fetch's or replication's end (``a``: the transfer, ``b``: its version)."""
    FAIL = 4
    """A node fails (``a``: the node)."""
    REPAIR = 5
    """A failed node is back (``a``: the node)."""
    SEGMENT = 6
    """The end of the stretch a subjob reads from one shared disk (``a``: its slot, ``b``:
    the run's version)."""
    FOLLOW = 7
    """A closed workload's next job arrives (``a``: its index among the followers)."""
    MASTER_TURN = 8
    """A subjob's packet reaches the master (``a``: its slot, ``b``: the run's version;
    stale once re-timed): sim/master.py."""


FINISH = int(Kind.FINISH)
SEGMENT = int(Kind.SEGMENT)
MASTER_TURN = int(Kind.MASTER_TURN)


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
    _user_ready: set[tuple[int, str]]
    """(node, user) pairs whose setup is paid (``CostModel.user_setup_s``)."""
    _user_recent: dict[int, dict[str, None]]
    """With ``CostModel.user_sandboxes_kept``: per node, its warm users, the least recently
    run first."""

    def _master_due(self, slot: int, run: Any) -> None:
        """A heap entry for the next turn at the master of the subjob ``run`` on ``slot``,
        after it was re-timed (sim/subjobs.py; nothing without a queue at the master)."""
        raise NotImplementedError
