"""Node caches (event ranges and whole files) and the cache directory: capacity, LRU order,
pins, fetches, directory queries."""

from __future__ import annotations

import struct
from itertools import pairwise
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache_reference import ReferenceRangeCache
from datasched.core import cache as cache_module
from datasched.core import directory as directory_module
from datasched.core.cache import RangeCache
from datasched.core.directory import CacheDirectory
from datasched.core.intervals import IntervalSet
from datasched.core.replacement import FIFO, LRU
from strategies import interval_sets


def r(a: int, b: int) -> IntervalSet:
    return IntervalSet.range(a, b)


def test_insert_within_capacity_keeps_everything() -> None:
    cache = RangeCache(100)
    added, evicted = cache.insert(r(0, 40), stamp=1.0)
    assert added == r(0, 40)
    assert not evicted
    assert cache.used_events == 40
    assert cache.lookup(r(30, 50)) == r(30, 40)


def test_lru_evicts_least_recently_used_first() -> None:
    cache = RangeCache(100)
    cache.insert(r(0, 50), stamp=1.0)
    cache.insert(r(100, 150), stamp=2.0)
    cache.touch(r(0, 50), stamp=3.0)  # now [100, 150) is the LRU extent
    added, evicted = cache.insert(r(200, 230), stamp=4.0)
    assert added == r(200, 230)
    assert evicted == r(100, 150)  # whole segments go (ponce-hersch Table 2)
    assert cache.content == r(0, 50) | r(200, 230)


def test_fifo_ignores_touches() -> None:
    cache = RangeCache(100, FIFO)
    cache.insert(r(0, 50), stamp=1.0)
    cache.insert(r(100, 150), stamp=2.0)
    cache.touch(r(0, 50), stamp=3.0)
    _, evicted = cache.insert(r(200, 250), stamp=4.0)
    assert evicted == r(0, 50)


def test_pinned_data_is_never_evicted() -> None:
    cache = RangeCache(100)
    cache.insert(r(0, 60), stamp=1.0)
    cache.insert(r(60, 100), stamp=2.0)
    token = cache.pin(r(0, 60))
    added, evicted = cache.insert(r(500, 600), stamp=3.0)
    assert r(0, 60).issubset(cache.content)
    assert evicted == r(60, 100)
    assert added == r(500, 540)  # only what fits next to the pinned data
    cache.unpin(token)
    _, evicted = cache.insert(r(700, 710), stamp=4.0)
    assert evicted.issubset(r(0, 60))


def test_fetch_in_flight_inserts_only_what_was_read() -> None:
    cache = RangeCache(1000)
    token = cache.begin_fetch(r(0, 100))
    assert cache.in_flight == r(0, 100)
    assert not cache.content
    added, _ = cache.end_fetch(token, r(0, 30), stamp=5.0)
    assert added == r(0, 30)
    assert not cache.in_flight
    assert cache.content == r(0, 30)


def test_zero_capacity_caches_nothing() -> None:
    cache = RangeCache(0)
    added, evicted = cache.insert(r(0, 10), stamp=0.0)
    assert not added
    assert not evicted
    assert not cache.content


ops = st.lists(
    st.tuples(
        st.sampled_from(["insert", "touch", "evict"]),
        st.integers(0, 300),
        st.integers(1, 80),
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(capacity=st.integers(0, 200), script=ops)
def test_capacity_and_content_stay_consistent(
    capacity: int, script: list[tuple[str, int, int]]
) -> None:
    """Whatever happens, used == content length <= capacity, and extents tile the content."""
    cache = RangeCache(capacity)
    for stamp, (op, start, size) in enumerate(script):
        data = r(start, start + size)
        before = cache.content
        if op == "insert":
            added, evicted = cache.insert(data, float(stamp))
            assert added.issubset(data)
            assert not (added & before)
            assert evicted.issubset(before)
            assert cache.content == (before - evicted) | added
        elif op == "touch":
            cache.touch(data, float(stamp))
            assert cache.content == before
        else:
            gone = cache.evict(data)
            assert gone == data & before
        assert cache.used_events == cache.content.length <= capacity
        tiles = IntervalSet([(a, b) for a, b, _ in cache.extents()])
        assert tiles == cache.content
        assert sum(b - a for a, b, _ in cache.extents()) == cache.used_events


@settings(max_examples=200)
@given(capacity=st.integers(1, 200), script=ops, queries=st.lists(interval_sets(400), max_size=5))
def test_partition_and_lookup_agree_with_the_content(
    capacity: int, script: list[tuple[str, int, int]], queries: list[IntervalSet]
) -> None:
    """``partition`` splits any set into its cached part and the rest, as set algebra on the
    content would (extents with different keys touch: their pieces must merge)."""
    cache = RangeCache(capacity)
    for stamp, (op, start, size) in enumerate(script):
        data = r(start, start + size)
        if op == "insert":
            cache.insert(data, float(stamp))
        elif op == "touch":
            cache.touch(data, float(stamp))
        else:
            cache.evict(data)
    content = cache.content
    for q in queries:
        cached, rest = cache.partition(q)
        assert cached == q & content == cache.lookup(q)
        assert rest == q - content
        for part in (cached, rest):
            assert part == IntervalSet(part)  # sorted, disjoint, non-adjacent


@settings(max_examples=300)
@given(capacity=st.integers(1, 200), script=ops, fifo=st.booleans())
def test_eviction_takes_the_oldest_keys_first(
    capacity: int, script: list[tuple[str, int, int]], fifo: bool
) -> None:
    """Whatever mix of reads and refreshes came before (refreshes push nothing on the heap):
    an insert evicts no extent whose key is newer than that of an extent it leaves behind,
    pins and the inserted data aside; and the heap keeps an entry at every extent's start
    that sorts no later than the extent's own key."""
    cache = RangeCache(capacity, FIFO if fifo else LRU)
    for stamp, (op, start, size) in enumerate(script):
        data = r(start, start + size)
        if op == "touch":
            cache.touch(data, float(stamp))
        elif op == "evict":
            cache.evict(data)
        else:
            before = list(cache.extents())
            _, evicted = cache.insert(data, float(stamp))
            gone = [key for a, b, key in before if r(a, b).overlaps(evicted)]
            kept = [key for a, b, key in before if not r(a, b).overlaps(evicted | data)]
            if gone and kept:
                assert max(gone) <= min(kept)
        listed: dict[int, list[tuple[int, int]]] = {}
        for entry in cache._heap:
            seq = (entry >> cache_module._START_BITS) & cache_module._SEQ_MASK
            listed.setdefault(entry & cache_module._START_MASK, []).append(
                (entry >> cache_module._KEY_SHIFT, seq)
            )
        for i, (a, _, key) in enumerate(cache.extents()):
            assert min(listed[a]) <= (cache_module._order(key), cache._seqs[i])


@settings(max_examples=200)
@given(
    script=st.lists(
        st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 200), st.integers(1, 60)),
        max_size=40,
    ),
    window=st.tuples(st.integers(0, 300), st.integers(0, 120)),
)
def test_directory_agrees_with_per_node_contents(
    script: list[tuple[bool, int, int, int]], window: tuple[int, int]
) -> None:
    """The segment map answers exactly what scanning every node would, for the whole space
    and for any window of it (the segments tile the window, clipped to it)."""
    directory = CacheDirectory(4)
    truth = [IntervalSet()] * 4
    for add, node, start, size in script:
        data = r(start, start + size)
        if add:
            directory.add(node, data)
            truth[node] = truth[node] | data
        else:
            directory.remove(node, data)
            truth[node] = truth[node] - data
    for node in range(4):
        assert directory.content(node) == truth[node]
    for a, b, holders in directory.holders(0, 300):
        for node in range(4):
            covered = r(a, b).issubset(truth[node])
            assert covered == (node in holders)
            if not covered:
                assert not (r(a, b) & truth[node])
    start, size = window
    segments = directory.holders(start, start + size)
    bounds = [start] + [b for _, b, _ in segments]
    assert [(a, b) for a, b, _ in segments] == list(pairwise(bounds))
    assert bounds[-1] == start + size
    assert all(a < b for a, b, _ in segments)
    for a, b, holders in segments:
        for node in range(4):
            assert (node in holders) == r(a, b).issubset(truth[node])
    by_node = directory.by_node(r(0, 300))
    for node in range(4):
        assert by_node.get(node, IntervalSet()) == truth[node] & r(0, 300)


@settings(max_examples=100)
@given(
    script=st.lists(
        st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 200), st.integers(1, 60)),
        max_size=60,
    ),
)
def test_directory_in_tiny_chunks_answers_as_in_one(
    script: list[tuple[bool, int, int, int]],
) -> None:
    """The segment map in chunks of two or three boundaries (every insert splits one, every
    walk crosses them, merges empty them) answers exactly as in large chunks, and both pass
    their own recomputation."""

    def play(d: CacheDirectory) -> None:
        for add, node, start, size in script:
            data = r(start, start + size)
            if add:
                d.add(node, data)
            else:
                d.remove(node, data)
            d.check()

    small, large = CacheDirectory(4), CacheDirectory(4)
    play(large)
    with mock.patch.object(directory_module, "_CHUNK", 1):
        play(small)
    if small.n_segments > 3:
        assert len(small._bounds) > 1  # the script did exercise several chunks
    assert small.n_segments == large.n_segments
    for a, b in ((0, 300), (5, 17), (150, 260)):
        assert small.holders(a, b) == large.holders(a, b)


@settings(max_examples=100)
@given(
    script=st.lists(st.tuples(st.booleans(), st.integers(0, 2), interval_sets()), max_size=25),
    probe=interval_sets(),
)
def test_directory_contents_in_place_agree_with_set_algebra(
    script: list[tuple[bool, int, IntervalSet]], probe: IntervalSet
) -> None:
    """Each node's content, kept as lists changed in place, is what unions and differences
    of IntervalSets give, for data of many ranges too (touching, overlapping, absent); the
    answers read from the lists (cached length, whether a node covers some data) are the
    set algebra's; the map passes its recomputation in chunks of two boundaries, and
    segments with equal holders share one frozenset."""
    truth = [IntervalSet()] * 3
    with mock.patch.object(directory_module, "_CHUNK", 1):
        directory = CacheDirectory(3)
        for add, node, data in script:
            before = directory.content(node)  # made now: must not change with the lists
            was = truth[node]
            if add:
                directory.add(node, data)
                truth[node] = truth[node] | data
            else:
                directory.remove(node, data)
                truth[node] = truth[node] - data
            assert before == was
            directory.check()
    for node in range(3):
        assert directory.content(node) == truth[node]
        assert directory.content(node).length == truth[node].length
        assert directory.cached_length(node, probe) == probe.overlap_length(truth[node])
        assert directory.covers(node, probe) == probe.issubset(truth[node])
        assert directory.cached_on(node, probe) == probe & truth[node]
        assert directory.covers(node, probe & truth[node])
    seen: dict[frozenset[int], frozenset[int]] = {}
    for _, _, holders in directory.holders(0, 300):
        assert seen.setdefault(holders, holders) is holders


def test_directory_changes_inside_one_segment_merge_with_their_neighbours() -> None:
    """A range inside one segment of the map (the common case, changed without the general
    pass) is cut out of it and merged with the segment before or after where their holders
    become equal, or both, or neither; the map stays what the contents make."""
    none: frozenset[int] = frozenset()
    zero, one = frozenset({0}), frozenset({1})
    d = CacheDirectory(2)
    steps = [
        # inside the first segment, neither end on a boundary
        (True, 0, r(10, 20), [(0, 10, none), (10, 20, zero), (20, 40, none)]),
        # from a boundary, the segment before now equal: it runs on to the range's end
        (True, 0, r(20, 25), [(0, 10, none), (10, 25, zero), (25, 40, none)]),
        # up to a boundary, the segment after now equal: it starts earlier
        (True, 0, r(5, 10), [(0, 5, none), (5, 25, zero), (25, 40, none)]),
        # a whole segment, equal to both neighbours once changed: all three merge
        (False, 0, r(5, 25), [(0, 40, none)]),
        # from the map's first boundary (no segment before), not to the next
        (True, 1, r(0, 5), [(0, 5, one), (5, 40, none)]),
        # a whole segment whose neighbours stay different
        (True, 0, r(5, 8), [(0, 5, one), (5, 8, zero), (8, 40, none)]),
        (True, 0, r(0, 5), [(0, 5, zero | one), (5, 8, zero), (8, 40, none)]),
        # a whole segment equal to the one after once changed
        (False, 1, r(0, 5), [(0, 8, zero), (8, 40, none)]),
        # nothing changes: the node holds it already
        (True, 0, r(2, 6), [(0, 8, zero), (8, 40, none)]),
    ]
    for add, node, data, want in steps:
        if add:
            d.add(node, data - d.content(node))
        else:
            d.remove(node, data)
        d.check()
        assert d.holders(0, 40) == want


def test_directory_check_catches_a_content_list_out_of_order() -> None:
    """A node's content lists broken behind the directory's back (ranges that touch, or a
    length that is not theirs) are reported, like a wrong segment map."""
    directory = CacheDirectory(1)
    directory.add(0, IntervalSet([(10, 20), (30, 40)]))
    directory.check()
    directory._stops_of[0][0] = 30  # [10, 30) and [30, 40): touching, not merged
    directory._content[0] = None
    with pytest.raises(ValueError, match="malformed"):
        directory.check()


def test_directory_check_catches_a_map_that_disagrees_with_the_contents() -> None:
    """A holder set changed behind the directory's back, or an unmerged pair of equal
    neighbours, is reported (Scheduler.validate relies on it)."""
    directory = CacheDirectory(2)
    directory.add(0, r(10, 20))
    directory.add(1, r(15, 30))
    directory.check()
    directory._holders[0][1] = frozenset({1})  # [10, 15) now claims node 1, not node 0
    with pytest.raises(ValueError, match="segment map"):
        directory.check()
    directory = CacheDirectory(1)
    directory.add(0, r(10, 20))
    directory._cut(15)  # [10, 15) and [15, 20) hold the same node: not merged
    with pytest.raises(ValueError, match="segment map"):
        directory.check()


def test_eviction_heap_stays_bounded_without_evictions() -> None:
    """A cache that never fills (no eviction drains the heap) keeps its heap O(extents),
    however often reads split and refresh its extents."""
    cache = RangeCache(10**9)
    cache.insert(r(0, 1000), stamp=0.0)
    for stamp in range(1, 5000):
        start = (stamp * 37) % 990
        cache.touch(r(start, start + 7), float(stamp))
    assert len(cache._heap) <= 2 * len(list(cache.extents())) + 1024
    assert cache.content == r(0, 1000)


def test_the_directory_drops_holder_sets_no_segment_holds_any_more() -> None:
    """The interned holder sets stay bounded on a long run: nodes in turn cache ranges and
    drop them, so the steps keep making holder sets never seen before. With the pruning
    floor at 8 the table never holds more than twice the most sets the segments ever held
    at once (or the floor), while the same steps unpruned keep every set ever made; the map
    passes its recomputation (which checks that each held set is the interned one) after
    every step, and answers as the unpruned one does."""

    def step(d: CacheDirectory, k: int) -> None:
        node = k % 12
        d.add(node, r(k % 50, k % 50 + 7))
        d.add((node + 5) % 12, r(k % 37, k % 37 + 3))
        d.remove((node + 7) % 12, r(k % 43, k % 43 + 11))

    pruned, kept = CacheDirectory(12), CacheDirectory(12)
    peak = 0
    with mock.patch.object(directory_module, "_PRUNE_FLOOR", 8):
        pruned._prune_at = 8
        for k in range(400):
            step(pruned, k)
            pruned.check()
            peak = max(peak, len({h for ch in pruned._holders for h in ch}))
            assert len(pruned._sets) <= pruned._prune_at <= max(8, 2 * (peak + 1)), k
    for k in range(400):
        step(kept, k)  # the default floor (4,096): never reached here, never pruned
    assert len(kept._sets) > 2 * (peak + 1) + 8  # so the pruned run did drop sets
    for a, b in ((0, 60), (3, 44)):
        assert pruned.holders(a, b) == kept.holders(a, b)


@settings(max_examples=300)
@given(
    capacity=st.integers(1, 120),
    script=st.lists(
        st.tuples(
            st.sampled_from(["insert", "insert", "touch", "refresh", "evict", "pin", "unpin"]),
            st.integers(0, 300),
            st.integers(1, 60),
            st.sampled_from([-3.5, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0, 1e300]),
        ),
        max_size=60,
    ),
    stamps=st.sampled_from(["rising", "falling", "drawn"]),
    fifo=st.booleans(),
)
def test_the_packed_cache_answers_as_the_reference(
    capacity: int, script: list[tuple[str, int, int, float]], stamps: str, fifo: bool
) -> None:
    """The range cache with its keys and sequence numbers in arrays and its heap entries
    packed into one integer gives, step by step, the answers and the extents (keys
    included) of the former one with a tuple per heap entry (tests/cache_reference.py):
    the same victims in the same order. Stamps rise (the simulator's clock), fall (every
    key negative: the packed order of negative floats) or are drawn (repeated, out of
    order, -0.0 beside 0.0)."""
    replacement = FIFO if fifo else LRU
    packed = RangeCache(capacity, replacement)
    reference = ReferenceRangeCache(capacity, replacement)
    pins: list[tuple[int, int]] = []
    for step, (op, start, size, drawn) in enumerate(script):
        stamp = {"rising": float(step), "falling": -1.0 - step, "drawn": drawn}[stamps]
        data = r(start, start + size)
        if op == "insert":
            assert packed.insert(data, stamp) == reference.insert(data, stamp)
        elif op == "touch":
            packed.touch(data, stamp)
            reference.touch(data, stamp)
        elif op == "refresh":
            hit = reference.lookup(data)
            packed.refresh(hit, stamp)
            reference.refresh(hit, stamp)
        elif op == "evict":
            assert packed.evict(data) == reference.evict(data)
        elif op == "pin":
            pins.append((packed.pin(data), reference.pin(data)))
        elif pins:
            a, b = pins.pop(start % len(pins))
            packed.unpin(a)
            reference.unpin(b)
        assert list(packed.extents()) == list(reference.extents())
        assert packed.used_events == reference.used_events
    assert packed.clear() == reference.clear()


def test_the_packed_heap_orders_negative_keys_and_minus_zero_as_floats_compare() -> None:
    """Keys packed into integers keep the floats' order: of two negative keys the smaller
    goes first, and -0.0 ties with 0.0 (the earlier insert goes first), as with tuples."""
    for first, second, victim in ((-1.0, -2.0, r(100, 150)), (0.0, -0.0, r(0, 50))):
        for cache in (RangeCache(100), ReferenceRangeCache(100)):
            cache.insert(r(0, 50), first)
            cache.insert(r(100, 150), second)
            assert cache.insert(r(200, 230), 5.0) == (r(200, 230), victim)


@given(st.lists(st.floats(allow_nan=False), min_size=2, max_size=20))
def test_a_keys_packed_order_is_its_bits_and_keeps_the_floats_order(keys: list[float]) -> None:
    """``_order`` (compiled: the float's bits read in C) gives the integer that ``struct``
    gives the sources, and sorts keys as floats compare (-0.0 with 0.0)."""
    for key in keys:
        bits = struct.unpack("<q", struct.pack("<d", key + 0.0))[0]
        assert cache_module._order(key) == (bits ^ (2**63 - 1) if bits < 0 else bits) + 2**63
    for a, b in pairwise(sorted(keys)):
        assert cache_module._order(a) <= cache_module._order(b)
        assert (cache_module._order(a) == cache_module._order(b)) == (a == b)


def test_the_packed_cache_refuses_events_past_its_bound() -> None:
    """Heap entries keep an extent's start in 60 bits: data past them, or below 0, is
    refused with the field named, not cached under a start that would alias another's."""
    cache = RangeCache(10)
    for data in (r(2**60 - 1, 2**60 + 1), r(-2, 3)):
        with pytest.raises(ValueError, match="data: only events 0 to 2\\*\\*60 - 1"):
            cache.insert(data, stamp=0.0)
    assert not cache.content
    cache.insert(r(2**60 - 3, 2**60), stamp=0.0)  # up to the bound: cached
    assert cache.content == r(2**60 - 3, 2**60)
