"""Transfers sharing links as a fluid: bytes conserved, capacity never exceeded."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given
from hypothesis import strategies as st

from datasched.core.model import Link
from datasched.sim.network import Network

LINKS = [
    Link("tertiary", "site:a", 10.0),
    Link("site:a", "node:0", 4.0),
    Link("site:a", "node:1", 8.0),
]
PATHS = [(LINKS[0], LINKS[1]), (LINKS[0], LINKS[2]), (LINKS[1],), (LINKS[2],)]


def test_one_transfer_goes_at_its_bottleneck_and_two_share_it() -> None:
    net = Network()
    t, _ = net.start(PATHS[0], 40.0, 0.0)
    assert t.rate == 4.0
    assert t.eta() == pytest.approx(10.0)
    u, changed = net.start(PATHS[2], 40.0, 5.0)  # shares node 0's 4 B/s link from t = 5
    assert {x.transfer_id for x in changed} == {t.transfer_id, u.transfer_id}
    assert t.rate == u.rate == 2.0
    assert t.eta() == pytest.approx(5.0 + 20.0 / 2.0)  # 20 B were left at t = 5
    _, changed = net.finish(t.transfer_id, 15.0)
    assert [x.transfer_id for x in changed] == [u.transfer_id]
    assert u.rate == 4.0
    assert u.eta() == pytest.approx(15.0 + 20.0 / 4.0)


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.floats(1.0, 100.0), st.floats(0.0, 20.0)),
        min_size=1,
        max_size=12,
    )
)
def test_bytes_are_conserved_and_links_never_oversubscribed(
    starts: list[tuple[int, float, float]],
) -> None:
    """Play random transfers to their ends: each moves exactly its bytes, finishes no sooner
    than its bottleneck allows, and the rates on a link never add up to more than it has."""
    net = Network()
    events: list[tuple[float, int, int, int]] = []  # (time, order, kind, payload)
    for i, (_, _, at) in enumerate(starts):
        heapq.heappush(events, (at, i, 0, i))
    moved: dict[int, float] = {}
    sizes: dict[int, float] = {}
    begun: dict[int, float] = {}
    order = len(starts)
    while events:
        now, _, kind, payload = heapq.heappop(events)
        if kind == 0:
            path, size, _ = starts[payload]
            t, changed = net.start(PATHS[path], size, now)
            sizes[t.transfer_id] = size
            begun[t.transfer_id] = now
        else:
            current = net.transfers.get(payload)
            if current is None or current.version != kind:
                continue  # stale
            done, changed = net.finish(payload, now)
            moved[payload] = done.n_bytes - done.left
            bottleneck = min(link.bytes_per_s for link in done.path)
            assert now - begun[payload] >= sizes[payload] / bottleneck - 1e-6
        for link in LINKS:
            assert net.rate_on(link) <= link.bytes_per_s * (1 + 1e-9)
        for x in changed:
            order += 1
            heapq.heappush(events, (x.eta(), order, x.version, x.transfer_id))
    assert not net.transfers
    assert moved.keys() == sizes.keys()
    for i, size in sizes.items():
        assert moved[i] == pytest.approx(size, rel=1e-9, abs=1e-6)
