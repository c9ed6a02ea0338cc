"""How an engine that streams work as packets cuts the next packet: the policy's decision.

A pull policy (PROOF's packetizers) answers each request with an ``Assign`` that *is* the
packet: it is cut only at file ends (a packet reads one file) and at the user's
``chunksize``. A push policy starts whole subjobs; it keeps the default packetizer,
:func:`default_packet_stop`: about ``target_s`` of work at the slot's measured pace,
shrinking to a quarter of the job's estimated time left as the job nears its end, so that
its slots finish together (PROOF's ``CalculatePacketSize``, the PROOF notes); a packet that
would leave less than half a packet of its file takes the rest of the file (each packet pays
a fixed cost to open its file and set up the processor, and a whole-file cache has fetched
that file anyway).

Pure: the engine passes what it measured (:class:`PacketRequest`), the policy's
:meth:`~datasched.core.policy.Policy.packet_stop` answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["PacketDepth", "PacketRequest", "PacketSizing", "default_packet_stop"]


@dataclass(frozen=True, slots=True)
class PacketSizing:
    """The default packetizer's settings (``--packet-s``, ``--chunksize`` of ``datasched
    run``)."""

    target_s: float = 2.0
    """Aimed time per packet (PROOF aims for seconds: long enough to amortise the round trip,
    short enough to preempt and rebalance quickly)."""
    min_events: int = 100
    max_events: int = 100_000
    chunksize: int | None = None
    """At most this many events a packet, for every policy (coffea's ``chunksize``); None:
    no cap."""

    def __post_init__(self) -> None:
        if not self.target_s > 0:
            raise ValueError(f"target_s: must be positive, got {self.target_s!r}")
        if not 1 <= self.min_events <= self.max_events:
            raise ValueError(
                f"min_events: must be >= 1 and <= max_events ({self.max_events}), "
                f"got {self.min_events!r}"
            )
        if self.chunksize is not None and self.chunksize < 1:
            raise ValueError(f"chunksize: must be at least 1, got {self.chunksize!r}")


@dataclass(frozen=True, slots=True)
class PacketDepth:
    """How many packets an engine keeps in flight a slot (the runtime's ``EngineConfig``;
    the simulator cuts its packets as the runtime would with it): at least
    ``packets_in_flight``, more while packets are short, about ``queue_s`` of work queued,
    at most ``max_in_flight``. It matters to the cut: a job's events left, which
    :func:`default_packet_stop` divides, count every packet whose result is not back."""

    packets_in_flight: int = 2
    max_in_flight: int = 8
    queue_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.queue_s > 0:
            raise ValueError(f"queue_s: must be positive, got {self.queue_s!r}")
        if not 1 <= self.packets_in_flight <= self.max_in_flight:
            raise ValueError(
                f"packets_in_flight: must be at least 1 and at most max_in_flight "
                f"({self.max_in_flight}), got {self.packets_in_flight!r}"
            )

    def depth(self, packet_s: float) -> int:
        """Packets in flight for a slot whose packets take ``packet_s`` seconds of work (0:
        not measured yet)."""
        if packet_s <= 0:
            return self.packets_in_flight
        depth = int(self.queue_s / packet_s) + 1
        return min(max(depth, self.packets_in_flight), self.max_in_flight)


class PacketRequest(NamedTuple):
    """What the engine knows when a slot needs its next packet: the head ``[start, stop)``
    of the slot's work (``stop`` within the file that ends at ``file_stop``)."""

    start: int
    stop: int
    file_stop: int
    pulled: bool
    """The work is an ``Assign`` (a pull policy's packet), not a started subjob."""
    s_per_event: float
    """The slot's measured time per event (seconds)."""
    events_left: int
    """Events of the job whose results are not back yet."""
    job_slots: int
    """Slots running the job."""


def default_packet_stop(sizing: PacketSizing, req: PacketRequest) -> int:
    """The end of the next packet (see the module docstring); always past ``req.start``."""
    stop = min(req.stop, req.file_stop)
    if not req.pulled:
        pace = max(req.s_per_event, 1e-9)
        left_s = req.events_left * pace / max(req.job_slots, 1)
        n = int(min(sizing.target_s, left_s / 4) / pace)
        n = min(max(n, sizing.min_events), sizing.max_events)
        if req.start + 1.5 * n < req.file_stop:
            stop = min(stop, req.start + n)
    if sizing.chunksize is not None:
        stop = min(stop, req.start + sizing.chunksize)
    return stop
