"""The calibration's per-packet cost: the CPU a packet's round trip uses in the master's
and the worker's processes, less the packet's own thread time. A fake client stands in for
Dask (its "round trip" burns a known CPU time in this process), so nothing here depends on
the machine's load or clock."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest

from datasched.runtime import calibrate as calibrate_module
from datasched.runtime.calibrate import RoundTrip, packet_round_trip, packet_round_trip_cpu
from datasched.runtime.worker import PacketSpec, run_packet

BURN_S = 0.02
OWN_S = 0.005


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class FakeClient:
    """Answers the worker's whereabouts (another host: its process is not ours to read)
    and runs each packet by burning ``BURN_S`` of CPU, of which the packet's own thread
    time says ``OWN_S``."""

    def __init__(self) -> None:
        self.packets: list[PacketSpec] = []
        self.scheduler = SimpleNamespace(identity=self._identity)

    async def _identity(self) -> dict[str, Any]:
        return {"workers": {"tls://127.0.0.1:1": {"name": 1}, "tls://127.0.0.1:2": {"name": 0}}}

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        async def answer() -> Any:
            assert kwargs["workers"] == ["tls://127.0.0.1:2"]  # pinned by address
            if fn is calibrate_module._whereabouts:
                return 1, "another-host"
            assert fn is run_packet
            self.packets.append(args[0])
            _burn(BURN_S)
            return SimpleNamespace(cpu_s=OWN_S)

        return answer()


def test_the_round_trip_is_its_cpu_less_the_packets_own() -> None:
    client = FakeClient()
    spec = PacketSpec(
        packet_id=-1, job_id=-1, url="/d/a.root", tree="Events", local_start=10,
        local_stop=2010, file_bytes=1000, processor=cast(Any, None),
    )  # fmt: skip
    got = asyncio.run(packet_round_trip_cpu(client, spec, "0", n=4))  # type: ignore[arg-type]
    assert got == pytest.approx(BURN_S - OWN_S, abs=0.01)
    assert len(client.packets) == 5  # one untimed first
    assert {(p.local_start, p.local_stop) for p in client.packets} == {(10, 11)}
    assert len({p.packet_id for p in client.packets}) == 5
    # A node no worker is named after: nothing measured (and nothing sent).
    assert asyncio.run(packet_round_trip_cpu(FakeClient(), spec, "7")) == 0.0  # type: ignore[arg-type]


def test_a_worker_not_read_leaves_the_whole_round_trip_to_the_master() -> None:
    # The worker's process is on another host: what this process (the master's) used,
    # less the packets' own time, is the master's serial part; the worker's is unknown (0).
    spec = PacketSpec(
        packet_id=-1, job_id=-1, url="/d/a.root", tree="Events", local_start=10,
        local_stop=2010, file_bytes=1000, processor=cast(Any, None),
    )  # fmt: skip
    got = asyncio.run(packet_round_trip(FakeClient(), spec, "0", n=4))  # type: ignore[arg-type]
    assert got.master_cpu_s == pytest.approx(BURN_S - OWN_S, abs=0.01)
    assert got.worker_cpu_s == 0.0
    assert got.total_s == got.master_cpu_s
    assert asyncio.run(packet_round_trip(FakeClient(), spec, "7")) == RoundTrip(0.0, 0.0)  # type: ignore[arg-type]


class BurstClient(FakeClient):
    """As :class:`FakeClient`, but the process does ``burst_s`` of other work during the
    ``at``-th packet (a collection, an earlier cluster's thread): CPU that is not the
    packets'."""

    def __init__(self, at: int, burst_s: float) -> None:
        super().__init__()
        self.at = at
        self.burst_s = burst_s

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        inner = super().submit(fn, *args, **kwargs)
        if fn is not run_packet:
            return inner

        async def answer() -> Any:
            got = await inner
            if len(self.packets) == self.at:
                _burn(self.burst_s)
            return got

        return answer()


def test_other_work_in_the_process_during_one_group_is_left_out() -> None:
    spec = PacketSpec(
        packet_id=-1, job_id=-1, url="/d/a.root", tree="Events", local_start=10,
        local_stop=2010, file_bytes=1000, processor=cast(Any, None),
    )  # fmt: skip
    # 0.3 s of other work during the 3rd timed packet (the 4th sent) of 6 in three groups:
    # spread over every packet it would add 50 ms to each; its group is not the cheapest.
    client = BurstClient(at=4, burst_s=0.3)
    got = asyncio.run(packet_round_trip(client, spec, "0", n=6, groups=3))  # type: ignore[arg-type]
    assert len(client.packets) == 7
    assert got.master_cpu_s == pytest.approx(BURN_S - OWN_S, abs=0.01)
    # Measured in one group, the burst is in it.
    one = asyncio.run(
        packet_round_trip(BurstClient(at=4, burst_s=0.3), spec, "0", n=6, groups=1)  # type: ignore[arg-type]
    )
    # Other threads of this process (a test's leftover cluster) can only add CPU, so the
    # figures are bounded below: the burst's 50 ms a packet is in, and above the grouped.
    assert one.master_cpu_s >= BURN_S - OWN_S + 0.3 / 6 - 0.01
    assert one.master_cpu_s - got.master_cpu_s >= 0.3 / 6 - 0.01
