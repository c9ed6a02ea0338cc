"""How the runtime's slot would cut a simulated subjob into packets: the policy's own rule
(:meth:`~datasched.core.policy.Policy.packet_stop`) with the runtime's depth of packets in
flight (:class:`~datasched.core.packets.PacketDepth`), so that a cost per packet
(``CostModel.packet_overhead_s``) and the master's queue (``CostModel.master_s_per_packet``)
are charged for the packets a run would have (docs/performance.md, "Packets cut by the
runtime's rule"). Pure: no engine state."""

from __future__ import annotations

from datasched.core.data import DataSpace
from datasched.core.model import Source
from datasched.core.packets import PacketDepth, PacketRequest
from datasched.core.policy import Policy

__all__ = ["cut_packets"]


def cut_packets(
    space: DataSpace,
    policy: Policy,
    depth: PacketDepth,
    segments: list[tuple[int, int, float, Source, int]],
    one_packet: bool,
) -> dict[int, tuple[list[int], int, list[int]]]:
    """The packets the runtime would cut from a subjob of these ``segments``, by file:
    file -> (the indices of the segments over its events, its events here, the number of
    its events here done at each of its packets' ends, in order).

    The runtime's slot cuts its work with the policy's own rule
    (:meth:`~datasched.core.policy.Policy.packet_stop`: the default packetizer's
    ``target_s`` of work at the slot's pace, shrinking to a quarter of what the job has
    left, the rest of a file where half a packet or less would be left of it; a pull
    policy's ``Assign``, ``one_packet``, only at file ends and its ``chunksize``). The same
    rule cuts the subjob's events here, in event order, each contiguous stretch of a file at
    its segments' mean time per event, with the subjob's events left (its packets in flight
    among them, ``depth``) as the job's on one slot (a job over ``k`` slots has about ``k``
    subjobs' events left). Segments of no events (the wait for a file's fetch) are in no
    packet."""
    files = space.files
    by_file: dict[int, list[int]] = {}
    stretches: list[tuple[int, int, int, float]] = []
    """Contiguous stretches of one file: start, stop, file, their events' time."""
    for k, (a, b, per, _, _) in sorted(enumerate(segments), key=lambda item: item[1][0]):
        x = a
        while x < b:
            i = space.file_at(x)
            y = min(b, files[i].stop)
            by_file.setdefault(i, []).append(k)
            if stretches and stretches[-1][1] == x and stretches[-1][2] == i:
                sa, _, _, t = stretches[-1]
                stretches[-1] = (sa, y, i, t + (y - x) * per)
            else:
                stretches.append((x, y, i, (y - x) * per))
            x = y
    left = sum(b - a for a, b, _, _ in stretches)
    flying: list[int] = []
    """The packets cut before the one being cut whose results are not back: the
    runtime cuts a slot's next packet when a result comes back, so the depth in flight
    less one (``PacketDepth.depth`` at the last packet's time); the job's events left
    count them."""
    done: dict[int, int] = {}
    cuts: dict[int, list[int]] = {}
    for a, b, i, t in stretches:
        pace = t / (b - a)
        file_stop = files[i].stop
        ends = cuts.setdefault(i, [])
        x = a
        while x < b:
            stop = policy.packet_stop(
                PacketRequest(x, b, file_stop, one_packet, pace, left + sum(flying), 1)
            )
            n = stop - x
            left -= n
            flying.append(n)
            del flying[: max(len(flying) - depth.depth(n * pace) + 1, 0)]
            done[i] = done.get(i, 0) + n
            ends.append(done[i])
            x = stop
    out: dict[int, tuple[list[int], int, list[int]]] = {}
    for i, ks in by_file.items():
        out[i] = (sorted(set(ks)), done[i], cuts[i])
    return out
