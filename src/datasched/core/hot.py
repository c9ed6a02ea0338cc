"""Hot-file replication decoupled from job placement: the Dataset Scheduler of
ranganathan-foster §3-4 ("DataLeastLoaded"), applied to the node caches of one cluster.

The paper's conclusion (§6) is that job placement and data replication need not be decided
together: jobs go where the data is, and a separate process watches how popular each dataset
is and, when the popularity passes a threshold, copies it to another site in the background.
:class:`HotReplicator` is that separate process for our core. It sits beside any policy
(``Scheduler(..., replicator=HotReplicator(threshold))``): it never starts, pins, moves or
holds work, and the policy never sees it; it only issues ``Replicate`` actions, which both
engines carry out and answer with ``TransferDone``.

The rules, with their parameters (declared once, :data:`HOT_PARAMS`):

* **Popularity** of a file is the number of distinct jobs that started work on it (a
  ``Start`` or an ``Assign`` whose events touch the file) within the last ``window_s``
  seconds (all of the run when ``window_s`` is None: the paper's popularity does not change
  over time, §5.1). Distinct jobs, not packets, so that how finely a policy cuts its work
  (a pull policy assigns a file in many packets) does not make a file look hotter.
* **Copies wanted**: ``1 + popularity // threshold``, at most ``max_copies``. So the first
  replication fires on the access that brings the popularity to ``threshold`` (when only one
  node holds the file), a second at ``2 * threshold``, and so on. Copies are the live nodes
  whose caches hold the whole file, plus replications of it in flight; copies made by
  ordinary cache fills count too, so nothing is replicated that the cluster already has.
* **Source**: a live node holding the whole file, the least loaded (running subjobs per
  slot), then the lowest id.
* **Target** (the paper's DataLeastLoaded; §5.3 found no difference from DataRandom): a live
  node with slots that neither holds nor is fetching the file, nor runs a subjob reading it
  (that subjob brings it, or reads it from storage), with room for it in its cache
  *without evicting anything* (capacity less what it caches and what is on its way); the
  least loaded first, then the most free bytes, then the lowest id. Replicas are ordinary
  cache content afterwards: evictable like any other, never pinned. Because nothing is
  evicted to make room, a replica can never push out pinned data or data a policy placed.
* **In flight**: at most ``max_in_flight`` replications at a time across the cluster; a
  target lost while a copy travels forgets it, and a copy that arrives empty (its source
  went away) simply leaves the file with fewer copies, to be tried again on a later access.

Whole-file caches are the natural unit (real ROOT files, the grid's datasets). A data space
cached at range grain is one file per dataset, usually larger than a node's cache, so there
the replicator seldom finds a source holding a file whole and does nothing.

Deterministic: no random stream, every tie broken by node number.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from datasched.core.actions import Action, Assign, Start
from datasched.core.events import Event, NodeLost, TransferDone
from datasched.core.intervals import IntervalSet
from datasched.core.policy import Param, ParamError, SchedulerView

__all__ = ["HOT_PARAMS", "HotReplicator"]

HOT_PARAMS: tuple[Param, ...] = (
    Param(
        "threshold",
        int,
        None,
        "Distinct jobs reading a file (within the window) that make it hot: one more copy "
        "per THRESHOLD jobs.",
        low=1,
        unit="jobs",
    ),
    Param(
        "window_s",
        float,
        None,
        "Only jobs that started reading a file within this many seconds count toward its "
        "popularity; None: the whole run.",
        low=0,
        low_open=True,
        none_ok=True,
        unit="seconds",
    ),
    Param(
        "max_copies",
        int,
        3,
        "Most copies of a file in node caches that replication makes (counting the first).",
        low=2,
    ),
    Param(
        "max_in_flight",
        int,
        2,
        "Most replications travelling at once across the cluster.",
        low=1,
    ),
)
"""The replicator's parameters, declared once (the command line reads them)."""

_OWNER = "replicate-hot"


class HotReplicator:
    """Replicates popular files between node caches, beside any policy (module docstring)."""

    def __init__(
        self,
        threshold: int,
        *,
        window_s: float | None = None,
        max_copies: int = 3,
        max_in_flight: int = 2,
    ) -> None:
        given: dict[str, Any] = {
            "threshold": threshold,
            "window_s": window_s,
            "max_copies": max_copies,
            "max_in_flight": max_in_flight,
        }
        checked = {p.name: p.check(_OWNER, given[p.name]) for p in HOT_PARAMS}
        self.threshold: int = checked["threshold"]
        self.window_s: float | None = checked["window_s"]
        self.max_copies: int = checked["max_copies"]
        self.max_in_flight: int = checked["max_in_flight"]
        self._last: dict[int, dict[int, float]] = {}
        """File -> job -> when that job last started work on it."""
        self._order: dict[int, deque[tuple[float, int]]] = {}
        """File -> (time, job) in the order seen, to expire the window cheaply."""
        self._in_flight: dict[tuple[int, IntervalSet], int] = {}
        """(target node, file's events) -> file, for the copies this replicator asked for."""
        self.replications = 0
        """Replications asked for so far (a counter for reports)."""

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> HotReplicator:
        """Build from a mapping of declared parameter names (unknown names are refused)."""
        known = {p.name for p in HOT_PARAMS}
        for name in params:
            if name not in known:
                raise ParamError(_OWNER, name, f"unknown; known: {', '.join(sorted(known))}")
        if params.get("threshold") is None:
            raise ParamError(_OWNER, "threshold", "must be given")
        return cls(**params)

    # -- what the scheduler calls -----------------------------------------------------------

    def observe(self, sched: SchedulerView, event: Event, actions: Sequence[Action]) -> None:
        """Called by the scheduler after each event, with the actions it produced: count the
        accesses among them and replicate what became hot (through ``sched.replicate``)."""
        if isinstance(event, TransferDone):
            self._in_flight.pop((event.node, event.data), None)
        elif isinstance(event, NodeLost):
            for key in [k for k in self._in_flight if k[0] == event.node]:
                del self._in_flight[key]
        touched: list[int] = []
        for action in actions:
            if isinstance(action, Start | Assign):
                sj = action.subjob
                for f in sched.space.files_in(sj.data):
                    if self._access(f, sj.job_id, sched.now):
                        touched.append(f)
        for f in touched:
            self._consider(sched, f)

    def popularity(self, file: int, now: float) -> int:
        """Distinct jobs that started work on ``file`` within the window ending at ``now``."""
        self._expire(file, now)
        return len(self._last.get(file, ()))

    def copies_wanted(self, file: int, now: float) -> int:
        return min(self.max_copies, 1 + self.popularity(file, now) // self.threshold)

    # -- inside -----------------------------------------------------------------------------

    def _access(self, file: int, job: int, now: float) -> bool:
        """Record that ``job`` read ``file``; True when the popularity grew (a new job)."""
        last = self._last.setdefault(file, {})
        new = job not in last
        last[job] = now
        if self.window_s is not None:
            self._order.setdefault(file, deque()).append((now, job))
        return new

    def _expire(self, file: int, now: float) -> None:
        if self.window_s is None:
            return
        order = self._order.get(file)
        last = self._last.get(file)
        if not order or last is None:
            return
        horizon = now - self.window_s
        while order and order[0][0] <= horizon:
            t, job = order.popleft()
            if last.get(job) == t:
                del last[job]

    def _consider(self, sched: SchedulerView, file: int) -> None:
        if len(self._in_flight) >= self.max_in_flight:
            return
        f = sched.space.files[file]
        events = f.events
        holders: list[int] = []
        copies = 0
        for node in sched.nodes:
            if sched.directory.cached_length(node, events) == f.n_events:
                holders.append(node)
                copies += 1
            elif sched.fetching(node).overlaps(events):
                copies += 1  # on its way there (a replica or a policy's fetch)
        if not holders or copies >= self.copies_wanted(file, sched.now):
            return
        target = self._target(sched, events, f.n_bytes, holders)
        if target is None:
            return
        source = min(holders, key=lambda n: (self._load(sched, n), n))
        self._in_flight[(target, events)] = file
        self.replications += 1
        sched.replicate(source, target, events)

    def _target(
        self, sched: SchedulerView, events: IntervalSet, n_bytes: int, holders: list[int]
    ) -> int | None:
        best: tuple[float, float, int] | None = None
        space = sched.space
        for node in sched.nodes:
            slots = len(sched.slots_of(node))
            if slots == 0 or node in holders or sched.fetching(node).overlaps(events):
                continue
            if self._reading(sched, node, events):
                continue  # its own subjob brings the file (or reads it from storage)
            used = space.cached_bytes(sched.directory.content(node))
            used += space.cached_bytes(sched.fetching(node))
            free = sched.topology.nodes[node].cache_bytes - used
            if free < n_bytes:
                continue
            key = (self._load(sched, node), -free, node)
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    @staticmethod
    def _reading(sched: SchedulerView, node: int, events: IntervalSet) -> bool:
        running = sched.running
        for slot in sched.slots_of(node):
            r = running.get(slot)
            if r is not None and r.subjob.data.overlaps(events):
                return True
        return False

    @staticmethod
    def _load(sched: SchedulerView, node: int) -> float:
        slots = len(sched.slots_of(node))
        return sched.node_running[node] / slots if slots else 0.0
