"""PROOF's pull scheduling as policies (ganis et al.): ``basic-packetizer`` and
``adaptive-packetizer``, with group-priority resource scheduling when priorities or quotas
are given.

Workers pull. A free slot's ``work_requested`` is PROOF's ``GetNextPacket``: the policy answers
with exactly one packet (an ``Assign``) from one job's packetizer
(:mod:`datasched.policies.proof.packetizers`), or leaves the slot idle: a worker that gets nothing
is done with that job, as in PROOF. Packets read data where it lies (``peer_reads``: another
node's disk is read over the network) and cache nothing.

Without groups every job gets every slot and jobs are served first come first served (PROOF
with one session at a time). With ``priorities`` or ``quotas`` (:mod:`datasched.policies.
groups`): the central scheduler gives each query N = N_free x f x P̄ + N_min workers, the
least loaded, when it arrives; a slot shared by several sessions serves them by the CPU
weight of their nice value (20 - their priority level in [1, 40]), those too low for a level
of their own taking turns per group (the paper's round-robin fallback); with ``quotas`` the
group priorities follow decayed usage towards the targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from datasched.core.intervals import IntervalSet
from datasched.core.model import Subjob
from datasched.core.policy import (
    DEFAULT,
    JobView,
    Param,
    ParamError,
    Policy,
    ReadMode,
    Returned,
    SchedulerView,
)
from datasched.policies.proof.groups import GROUP_PARAMS
from datasched.policies.proof.packetizers import (
    AdaptivePacketizer,
    BasicPacketizer,
    Locate,
    Packetizer,
    Piece,
    Roster,
)
from datasched.policies.proof.sessions import GroupScheduler
from datasched.policies.registry import register

__all__ = ["AdaptivePacketizerPolicy", "BasicPacketizerPolicy", "ProofPolicy"]


@dataclass(slots=True)
class _Packet:
    """A packet in flight on a slot."""

    job_id: int
    subjob_id: int
    piece: Piece
    data: IntervalSet
    start_s: float


class ProofPolicy(Policy):
    """What both packetizer policies share: the pull, the jobs' packetizers, the groups."""

    reads = ReadMode(cache_fill=False, peer_reads=True)

    def __init__(self, group_params: dict[str, Any]) -> None:
        self.groups = GroupScheduler(group_params)
        self._jobs: dict[int, Packetizer] = {}
        self._inflight: dict[int, _Packet] = {}
        self._running: dict[int, int] = {}
        """Job -> its packets in flight."""
        self._perf: dict[int, float] = {}
        self._todo: dict[int, None] = {}
        """The jobs with events to hand out (``has_todo``), in arrival order: a free slot
        asks those only, the others refusing every slot (docs/performance.md)."""
        self._roster: Roster | None = None
        """Every slot of the cluster with its node and performance index, for the next query
        (without resource scheduling every query gets them all); None: to build again (a
        node joined or was lost)."""
        self.forced = 0

    # -- what a subclass gives ---------------------------------------------------------------

    def packetizer(
        self, data: IntervalSet, files: list[tuple[int, int, int]], sched: SchedulerView
    ) -> Packetizer:
        raise NotImplementedError

    # -- metrics (PolicyMetrics) ---------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        return {"forced packets": self.forced}

    def priorities(self) -> dict[str, float]:
        """The group priorities in force (the quota controller's, when quotas are set)."""
        return self.groups.priorities()

    # -- hooks ----------------------------------------------------------------------------------

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        space = sched.space
        files = [
            (i, space.files[i].start, space.files[i].stop) for i in space.files_in(js.job.data)
        ]
        pk = self.packetizer(js.job.data, files, sched)
        self._jobs[js.job_id] = pk
        self.groups.add(js.job_id, js.job.group, js.job.user)
        self._running[js.job_id] = 0
        self._add_workers(sched, pk, js.job_id)
        if pk.has_todo():
            self._todo[js.job_id] = None
        self._offer_idle(sched)

    def work_requested(self, sched: SchedulerView, slot: int, ended: JobView | None) -> None:
        self._packet_left(sched, slot)
        self._serve(sched, slot)
        self._unstick(sched)

    def work_returned(self, sched: SchedulerView, sj: Subjob, cause: Returned) -> None:
        pk = self._jobs.get(sj.job_id)
        if pk is None:
            sched.suspend(sj)  # not ours (never happens): the scheduler parks it
            return
        for slot, pkt in list(self._inflight.items()):
            if pkt.job_id == sj.job_id and sj.data.issubset(pkt.data):
                r = sched.running.get(slot)
                if r is None or r.subjob.subjob_id != pkt.subjob_id:
                    self._packet_left(sched, slot, returned=sj.data.length)
                    break
        sched.discard(sj)
        pk.give_back(sj.data)
        if sj.job_id not in self._todo and pk.has_todo():
            # Back in the jobs with work, at its place in arrival order.
            self._todo = {j: None for j in self._jobs if j in self._todo or j == sj.job_id}
        pk.revive()
        self._offer_idle(sched)
        self._unstick(sched)

    def node_lost(self, sched: SchedulerView, node: int) -> None:
        self._roster = None
        slots = set(sched.slots_of(node))
        for slot in slots:
            pkt = self._inflight.pop(slot, None)
            if pkt is not None:
                self._retire(pkt)
                self.groups.withdraw(slot, sched.now)
        for pk in self._jobs.values():
            for slot in slots:
                pk.remove_worker(slot)
            pk.relocate(node, locator(sched))

    def node_joined(self, sched: SchedulerView, node: int) -> None:
        self._roster = None
        if self.groups.on:
            return  # new slots serve the next queries
        for pk in self._jobs.values():
            for slot in sched.slots_of(node):
                self._add_worker(sched, pk, slot)

    def job_cancelled(self, sched: SchedulerView, js: JobView) -> None:
        self._drop(js.job_id)

    # -- packets ----------------------------------------------------------------------------------

    def _packet_left(self, sched: SchedulerView, slot: int, returned: int = 0) -> None:
        pkt = self._inflight.pop(slot, None)
        if pkt is None:
            return
        self._retire(pkt)
        pk = self._jobs.get(pkt.job_id)
        if pk is None:
            self.groups.withdraw(slot, sched.now)
            return
        seconds = sched.now - pkt.start_s
        events = pkt.data.length - returned
        pk.packet_done(slot, pkt.piece, events, seconds)
        cpu_s = sched.left_cpu_s.get(slot)
        self.groups.used(pkt.job_id, slot, seconds, sched.now, events, cpu_s)

    def _retire(self, pkt: _Packet) -> None:
        """A packet is no longer in flight (its job may be gone already)."""
        if pkt.job_id in self._running:
            self._running[pkt.job_id] -= 1

    def _assign(
        self, sched: SchedulerView, slot: int, job_id: int, piece: Piece, data: IntervalSet
    ) -> None:
        sj = sched.new_subjob(sched.jobs[job_id], data)
        sched.assign(sj, slot)
        self._inflight[slot] = _Packet(job_id, sj.subjob_id, piece, data, sched.now)
        self._running[job_id] += 1
        prior_s = data.length * sched.s_per_event_on(slot, data)
        self.groups.assigned(job_id, slot, data.length, prior_s, sched.now)

    def _try(self, sched: SchedulerView, slot: int, job_id: int, force: bool = False) -> bool:
        pk = self._jobs[job_id]
        if not pk.has_todo() or not pk.may_ask(slot, force):
            return False
        got = pk.next_packet(slot, force=force)
        if got is None:
            return False
        if not pk.has_todo():
            del self._todo[job_id]
        self._assign(sched, slot, job_id, *got)
        return True

    def _serve(self, sched: SchedulerView, slot: int) -> bool:
        """Give the free ``slot`` a packet: first come first served, or by CPU weight."""
        for job_id in [j for j in self._jobs if j not in sched.jobs]:
            self._drop(job_id)
        # A job with nothing to hand out refuses every slot: only those with work are asked.
        if not self.groups.on:
            return any(self._try(sched, slot, job_id) for job_id in list(self._todo))
        waiting = [job_id for job_id in self._todo if self._jobs[job_id].may_ask(slot)]
        for entity, jobs in self.groups.order(slot, waiting):
            for job_id in jobs:
                if self._try(sched, slot, job_id):
                    self.groups.served(slot, entity)
                    return True
        return False

    def _offer_idle(self, sched: SchedulerView) -> None:
        for slot in list(sched.idle_slots):
            if not self.groups.on and not self._todo:
                # Nothing left to hand out: every further slot would be refused by every
                # job. Stopping here spares a pass over the cluster's idle slots at each
                # query, once its packets are out (docs/scale.md); with resource scheduling
                # on, each slot's turn also keeps the groups' books, so it is not skipped.
                break
            if sched.is_idle(slot):
                self._serve(sched, slot)

    def _unstick(self, sched: SchedulerView) -> None:
        """A job with events to hand out and nothing in flight is not left waiting on the
        rules: its workers ask again, it gets workers if it has none, and an idle one of its
        slots takes a packet whatever the limit on workers per node (PROOF would wait on the
        workers still reading; here none is)."""
        if not sched.idle_slots:
            return  # every slot will ask again
        for job_id in list(self._todo):  # the others have nothing to hand out
            pk = self._jobs[job_id]
            if self._running.get(job_id, 0) or not pk.has_todo() or job_id not in sched.jobs:
                continue
            pk.revive()
            if not pk.n_workers:
                self._add_workers(sched, pk, job_id)
            for slot in list(sched.idle_slots):
                if not pk.has_worker(slot):
                    continue
                if self._try(sched, slot, job_id):
                    break
                if self._try(sched, slot, job_id, force=True):
                    self.forced += 1
                    break

    def packet_nice(self, job_id: int) -> int | None:
        """Nice 20 - the session's level (§3.2), when resource scheduling is on and
        ``os_nice`` asks for it: the slots' order by CPU weight already applies the
        priority, so by default the worker threads are not re-niced as well."""
        return self.groups.nice_of(job_id) if self.groups.os_nice else None

    def _drop(self, job_id: int) -> None:
        self._jobs.pop(job_id, None)
        self._running.pop(job_id, None)
        self._todo.pop(job_id, None)
        self.groups.remove(job_id)

    # -- workers --------------------------------------------------------------------------------

    def _add_workers(self, sched: SchedulerView, pk: Packetizer, job_id: int) -> None:
        """Give the query ``job_id`` its workers: without resource scheduling the cluster's
        roster (every slot, kept between queries, each worker made as it asks), else the
        central scheduler's choice, one by one."""
        if self.groups.on:
            for slot in self._workers_for(sched, job_id):
                self._add_worker(sched, pk, slot)
            return
        if self._roster is None:
            slots = self._workers_for(sched, job_id)
            self._roster = Roster(
                (slot, sched.slot_node[slot], self._perf_of(sched, sched.slot_node[slot]))
                for slot in slots
            )
        pk.add_roster(self._roster)

    def _add_worker(self, sched: SchedulerView, pk: Packetizer, slot: int) -> None:
        node = sched.slot_node[slot]
        pk.add_worker(slot, node, self._perf_of(sched, node))

    def _perf_of(self, sched: SchedulerView, node: int) -> float:
        perf = self._perf.get(node)
        if perf is None:
            # PROOF's performance index: 100 for the fastest node, less for slower ones.
            rates = sched.topology.rates(node, sched.cost, sched.space.bytes_per_event)
            perf = self._perf[node] = 100.0 * sched.fastest_s_per_event / rates[0]
        return perf

    def _workers_for(self, sched: SchedulerView, job_id: int) -> list[int]:
        """The slots a query gets: all of them, or the central scheduler's N least loaded."""
        slots = [s for n in sched.nodes for s in sched.node_slots[n]]
        if not self.groups.on or not slots:
            return slots
        load = dict.fromkeys(slots, 0)
        for other, pk in self._jobs.items():
            if other != job_id:
                for s in pk.workers:
                    if s in load:
                        load[s] += 1
        free = sum(1 for s in slots if load[s] == 0)
        n = self.groups.query_size(job_id, free, len(slots))
        return sorted(slots, key=lambda s: (load[s], sched.node_running[sched.slot_node[s]], s))[:n]


def locator(sched: SchedulerView) -> Locate:
    """Where a job's events lie, for its packetizer."""

    def locate(start: int, stop: int) -> list[tuple[int, int, int | None]]:
        """Runs of [start, stop) by the node holding them: a worker's node when one
        holds them, else the lowest holder; None: central storage only."""
        runs: list[tuple[int, int, int | None]] = []
        at = start
        sliver = 0 if sched.space.boundaries else sched.min_subjob_events
        for a, b, holders in sched.directory.holders(start, stop):
            live = [h for h in holders if not sched.is_lost(h)]
            workers = [h for h in live if sched.node_slots[h]]
            holder = min(workers) if workers else (min(live) if live else None)
            if holder is not None and b - a < sliver:
                holder = None  # a cached sliver of a range: not worth a packet of its own
            if a > at:
                runs.append((at, a, None))
            if runs and runs[-1][2] == holder and runs[-1][1] == a:
                runs[-1] = (runs[-1][0], b, holder)
            else:
                runs.append((a, b, holder))
            at = b
        if at < stop:
            runs.append((at, stop, None))
        return runs

    return locate


@register
class BasicPacketizerPolicy(ProofPolicy):
    """PROOF's basic packetizer (ganis et al. §2.1.1, appendix A.1)."""

    name = "basic-packetizer"
    section = "ganis et al. §2.1.1, §3"
    summary = "PROOF pull: local files first, fixed packets, at most 4 workers per file server"
    params: ClassVar[tuple[Param, ...]] = (
        Param(
            "fraction", int, 20, "base packet = events / (fraction x workers)", low=1, option=False
        ),
        Param(
            "max_workers_per_node",
            int,
            4,
            "most workers reading one node's files at once",
            low=1,
            none_ok=True,
            option=False,
        ),
        Param(
            "packet_events",
            int,
            None,
            "a fixed base packet size instead (PROOF_PacketSize)",
            low=1,
            none_ok=True,
            option=False,
        ),
        *GROUP_PARAMS,
    )

    def __init__(
        self,
        *,
        fraction: int = DEFAULT,
        max_workers_per_node: int | None = DEFAULT,
        packet_events: int | None = DEFAULT,
        priorities: str = DEFAULT,
        quotas: str = DEFAULT,
        worker_fraction: float = DEFAULT,
        min_workers: int = DEFAULT,
        levels: int = DEFAULT,
        round_robin: bool = DEFAULT,
        kernel: str = DEFAULT,
        usage_half_life_s: float = DEFAULT,
        quota_period_s: float = DEFAULT,
        os_nice: bool = DEFAULT,
    ) -> None:
        super().__init__({k: v for k, v in locals().items() if k in {p.name for p in GROUP_PARAMS}})
        self.fraction = fraction
        self.max_workers_per_node = max_workers_per_node
        self.packet_events = packet_events

    def packetizer(
        self, data: IntervalSet, files: list[tuple[int, int, int]], sched: SchedulerView
    ) -> Packetizer:
        return BasicPacketizer(
            data,
            files,
            locator(sched),
            fraction=self.fraction,
            max_workers_per_node=self.max_workers_per_node,
            packet_events=self.packet_events,
        )


@register
class AdaptivePacketizerPolicy(ProofPolicy):
    """PROOF's adaptive packetizer (ganis et al. §2.1.2, appendix A.2)."""

    name = "adaptive-packetizer"
    section = "ganis et al. §2.1.2, §3"
    summary = "PROOF pull: remote data early for workers predicted to end first, 3-20 s packets"
    params: ClassVar[tuple[Param, ...]] = (
        Param(
            "fraction",
            float,
            4.0,
            "a packet lasts the job's time left / fraction",
            low=0,
            low_open=True,
            option=False,
        ),
        Param(
            "min_packet_s",
            float,
            3.0,
            "shortest packet",
            low=0,
            low_open=True,
            unit="seconds",
            option=False,
        ),
        Param(
            "max_packet_s",
            float,
            20.0,
            "longest packet",
            low=0,
            low_open=True,
            unit="seconds",
            option=False,
        ),
        Param(
            "calibration_events",
            int,
            1000,
            "a worker's first packet",
            low=1,
            unit="events",
            option=False,
        ),
        Param(
            "local_preference", float, 1.2, "base preference for local data", low=0, option=False
        ),
        Param(
            "max_workers_per_node",
            int,
            None,
            "most workers from other nodes reading one node's files at once",
            low=1,
            none_ok=True,
            option=False,
        ),
        *GROUP_PARAMS,
    )

    def __init__(
        self,
        *,
        fraction: float = DEFAULT,
        min_packet_s: float = DEFAULT,
        max_packet_s: float = DEFAULT,
        calibration_events: int = DEFAULT,
        local_preference: float = DEFAULT,
        max_workers_per_node: int | None = DEFAULT,
        priorities: str = DEFAULT,
        quotas: str = DEFAULT,
        worker_fraction: float = DEFAULT,
        min_workers: int = DEFAULT,
        levels: int = DEFAULT,
        round_robin: bool = DEFAULT,
        kernel: str = DEFAULT,
        usage_half_life_s: float = DEFAULT,
        quota_period_s: float = DEFAULT,
        os_nice: bool = DEFAULT,
    ) -> None:
        if min_packet_s > max_packet_s:
            raise ParamError(self.name, "min_packet_s", "must not be above max_packet_s")
        super().__init__({k: v for k, v in locals().items() if k in {p.name for p in GROUP_PARAMS}})
        self.fraction = fraction
        self.min_packet_s = min_packet_s
        self.max_packet_s = max_packet_s
        self.calibration_events = calibration_events
        self.local_preference = local_preference
        self.max_workers_per_node = max_workers_per_node

    def packetizer(
        self, data: IntervalSet, files: list[tuple[int, int, int]], sched: SchedulerView
    ) -> Packetizer:
        return AdaptivePacketizer(
            data,
            files,
            locator(sched),
            fraction=self.fraction,
            min_packet_s=self.min_packet_s,
            max_packet_s=self.max_packet_s,
            calibration_events=self.calibration_events,
            local_preference=self.local_preference,
            max_workers_per_node=self.max_workers_per_node,
        )
