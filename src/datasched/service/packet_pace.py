"""The ETAs priced per packet: the daemon as the queue every packet passes.

A packet's time from its slot to its storing is mostly its way back through the daemon's
process (the result to Dask's scheduler, the runner, the store), a cost per packet, not per
event; the daemon serves one packet at a time, so a loaded cluster's pace is set by it, not
by the nodes (docs/service-whatif.md, "The pace assumed against the pace delivered"). Priced
so, the simulator gets the nodes at the packets' own CPU per event and the daemon as its
master queue (``CostModel.master_s_per_packet``) at the daemon's CPU per stored packet,
measured on its own process clock between refreshes (:class:`DaemonPace`); the simulator
cuts the packets as the runner does (``sim/packetcut.py``)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from sqlalchemy import func, select

from datasched.service.contracts import ClusterSnapshot, NodeRates
from datasched.service.store.db import Store
from datasched.service.store.models import Packet

__all__ = ["MIN_PACKETS", "DaemonPace", "packet_cpu", "priced_per_packet"]

MIN_PACKETS = 20
"""The least packets stored between two samples of the daemon's clock for a measure."""
RECENT = 500
"""The packets whose CPU per event prices the nodes and jobs (the latest stored)."""


class DaemonPace:
    """The daemon's CPU seconds per packet it stores: its process clock (every thread: the
    runner, Dask's scheduler, the web server, these predictions) over the packets stored
    meanwhile, sampled at each refresh. The least over the recent spans of at least
    :data:`MIN_PACKETS` packets: a span in which the daemon also answered a burst of
    submissions counts that work as the packets' (it passes)."""

    def __init__(self, store: Store, cpu: Callable[[], float] = time.process_time) -> None:
        self.store = store
        self.cpu = cpu
        self._samples: deque[tuple[float, int]] = deque(maxlen=64)
        self._paces: deque[float] = deque(maxlen=8)

    def sample(self) -> float | None:
        """Take a sample now; the daemon's seconds per packet (None: not measured yet)."""
        with self.store.reading() as s:
            stored = int(s.scalar(select(func.count(Packet.id))) or 0)
        now = (self.cpu(), stored)
        for cpu, count in reversed(self._samples):
            if stored - count >= MIN_PACKETS:
                self._paces.append((now[0] - cpu) / (stored - count))
                self._samples.clear()
                break
        self._samples.append(now)
        return min(self._paces) if self._paces else None


def packet_cpu(store: Store) -> tuple[float | None, dict[str, float]]:
    """CPU seconds per event of the latest :data:`RECENT` packets, all together and per job
    (None: none stored)."""
    with store.reading() as s:
        rows = s.execute(
            select(Packet.job_id, Packet.cpu_s, Packet.start, Packet.stop)
            .order_by(Packet.id.desc())
            .limit(RECENT)
        ).all()
    cpu: dict[str, float] = {}
    events: dict[str, int] = {}
    for job_id, cpu_s, start, stop in rows:
        cpu[job_id] = cpu.get(job_id, 0.0) + float(cpu_s)
        events[job_id] = events.get(job_id, 0) + int(stop) - int(start)
    total = sum(events.values())
    if not total or not sum(cpu.values()) > 0:
        return None, {}
    per_job = {j: cpu[j] / n for j, n in events.items() if n > 0 and cpu[j] > 0}
    return sum(cpu.values()) / total, per_job


def priced_per_packet(
    snapshot: ClusterSnapshot, mean_cpu: float, per_job: dict[str, float]
) -> ClusterSnapshot:
    """``snapshot`` with every node at the packets' CPU per event (reading from its cache,
    a peer's or storage alike: the demo's data is local) and each job at its own packets'
    CPU per event (the mean where it has none)."""
    rate = 1.0 / mean_cpu
    nodes = tuple(replace(n, rates=NodeRates(rate, rate, rate, None)) for n in snapshot.nodes)
    jobs = tuple(replace(j, cpu_s_per_event=per_job.get(j.id, mean_cpu)) for j in snapshot.jobs)
    return replace(snapshot, nodes=nodes, jobs=jobs)
