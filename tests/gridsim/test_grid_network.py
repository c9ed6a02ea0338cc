"""Transfers over the grid's tiered tree (ranganathan-foster §5.1), multi-hop paths sharing
links as a fluid: after every start and end each transfer goes at its least equal share
along its path, no link carries more than its bandwidth, every byte is moved once, and no
transfer ends before its bottleneck allows."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datasched.core.model import Link
from datasched.gridsim.model import TierTree
from datasched.sim.network import Network


@st.composite
def trees_and_transfers(draw: st.DrawFn) -> tuple[TierTree, list[tuple[int, int, float, float]]]:
    sites = draw(st.integers(3, 12))
    tier1 = draw(st.integers(1, sites - 1))
    tree = TierTree(sites, tier1, 1.0)
    # Links of different bandwidths, so bottlenecks sit at different tiers.
    tree.up = [None] + [
        Link(f"site:{s}", f"site:{tree.parent[s]}", draw(st.floats(1.0, 50.0)))
        for s in range(1, sites)
    ]
    pair = st.tuples(st.integers(0, sites - 1), st.integers(0, sites - 1)).filter(
        lambda p: p[0] != p[1]
    )
    transfers = draw(
        st.lists(
            st.tuples(pair, st.floats(1.0, 200.0), st.floats(0.0, 30.0)),
            min_size=1,
            max_size=16,
        )
    )
    return tree, [(a, b, size, at) for (a, b), size, at in transfers]


def assert_fluid(net: Network, links: list[Link]) -> None:
    for t in net.transfers.values():
        share = min(link.bytes_per_s / net.count_on(link) for link in t.path)
        assert t.rate == pytest.approx(share, rel=1e-12)
    for link in links:
        assert net.rate_on(link) <= link.bytes_per_s * (1 + 1e-9)


@settings(max_examples=80, deadline=None)
@given(trees_and_transfers())
def test_multi_hop_transfers_share_links_as_a_fluid(
    case: tuple[TierTree, list[tuple[int, int, float, float]]],
) -> None:
    tree, starts = case
    links = [x for x in tree.up if x is not None]
    net = Network()
    events: list[tuple[float, int, int, int]] = []  # (time, order, version or -1, payload)
    for i, (_, _, _, at) in enumerate(starts):
        heapq.heappush(events, (at, i, -1, i))
    order = len(starts)
    sizes: dict[int, float] = {}
    begun: dict[int, float] = {}
    moved: dict[int, float] = {}
    while events:
        now, _, version, payload = heapq.heappop(events)
        if version < 0:
            a, b, size, _ = starts[payload]
            path = tree.path(a, b)
            assert len(path) == tree.depth[a] + tree.depth[b] - 2 * _ancestor_depth(tree, a, b)
            t, changed = net.start(path, size, now)
            sizes[t.transfer_id] = size
            begun[t.transfer_id] = now
        else:
            current = net.transfers.get(payload)
            if current is None or current.version != version:
                continue  # a completion planned at a rate since changed
            done, changed = net.finish(payload, now)
            moved[payload] = done.n_bytes - done.left
            bottleneck = min(link.bytes_per_s for link in done.path)
            assert now - begun[payload] >= sizes[payload] / bottleneck * (1 - 1e-9)
        assert_fluid(net, links)
        for x in changed:
            order += 1
            heapq.heappush(events, (x.eta(), order, x.version, x.transfer_id))
    assert not net.transfers
    assert moved.keys() == sizes.keys()
    for i, size in sizes.items():
        assert moved[i] == pytest.approx(size, rel=1e-9, abs=1e-6)


def _ancestor_depth(tree: TierTree, a: int, b: int) -> int:
    up = set()
    while a >= 0:
        up.add(a)
        a = tree.parent[a]
    while b not in up:
        b = tree.parent[b]
    return tree.depth[b]
