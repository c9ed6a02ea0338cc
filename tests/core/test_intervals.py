"""IntervalSet against a reference model: the plain ``set[int]`` of its events.

Every operation is checked on random sets (strategies in ``tests/strategies.py``) for the same
answer as the set model, for the representation invariant (sorted, disjoint, non-adjacent,
non-empty ranges), and for leaving its operands unchanged (results may share nothing mutable
with them that a later operation could alter).
"""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from datasched.core.intervals import IntervalSet, cut_out, joined, overlap_count, splice_in
from strategies import dense_event_sets, event_sets, interval_sets, raw_ranges

MAX_EVENT = 200


def events(s: IntervalSet) -> set[int]:
    """The reference model of ``s``."""
    return {e for a, b in s for e in range(a, b)}


def check_invariant(s: IntervalSet) -> None:
    """Sorted, disjoint, non-adjacent, non-empty ranges; cached length and views agree."""
    ranges = s.ranges
    for a, b in ranges:
        assert type(a) is int
        assert type(b) is int
        assert a < b
    for (_, b0), (a1, _) in itertools.pairwise(ranges):
        assert b0 < a1, f"ranges not sorted, disjoint and non-adjacent: {ranges}"
    assert s.length == sum(b - a for a, b in ranges)
    assert s.n_ranges == len(ranges)
    assert tuple(s) == ranges
    assert bool(s) == (s.length > 0) == (not s.is_empty)


# -- construction -----------------------------------------------------------------------------


@given(raw_ranges(MAX_EVENT, max_ranges=12))
def test_constructor_normalises(pairs: list[tuple[int, int]]) -> None:
    s = IntervalSet(pairs)
    check_invariant(s)
    assert events(s) == {e for a, b in pairs for e in range(a, b)}
    assert s == IntervalSet(reversed(pairs))


@given(event_sets(MAX_EVENT))
def test_from_events(model: set[int]) -> None:
    s = IntervalSet.from_events(model)
    check_invariant(s)
    assert events(s) == model
    assert s == IntervalSet.from_events(sorted(model, reverse=True))


@given(st.lists(st.integers(0, MAX_EVENT), unique=True).map(sorted), st.data())
def test_from_sorted_joins_touching_ranges(cuts: list[int], data: st.DataObject) -> None:
    # Sorted, disjoint ranges that may touch, as the cache module and cutting by cache give.
    pairs = list(itertools.pairwise(cuts))
    chosen = [p for p in pairs if data.draw(st.booleans())]
    s = IntervalSet.from_sorted(chosen)
    check_invariant(s)
    assert s == IntervalSet(chosen)
    # The same from two lists (a range cache's lookups), the lists left as they were.
    starts, stops = [a for a, _ in chosen], [b for _, b in chosen]
    j = joined(starts, stops)
    check_invariant(j)
    assert j == s
    assert (starts, stops) == ([a for a, _ in chosen], [b for _, b in chosen])


@given(st.integers(-50, 50), st.integers(0, 50))
def test_range(start: int, size: int) -> None:
    s = IntervalSet.range(start, start + size)
    check_invariant(s)
    assert events(s) == set(range(start, start + size))
    assert s == IntervalSet([(start, start + size)])


def test_constructor_merges_adjacent_and_overlapping_and_drops_empty() -> None:
    s = IntervalSet([(20, 30), (5, 5), (0, 10), (10, 12), (25, 40), (50, 50)])
    assert s.ranges == ((0, 12), (20, 40))
    assert IntervalSet([(3, 3)]) == IntervalSet.empty() == IntervalSet()


@pytest.mark.parametrize(
    "bad",
    [(5, 4), (0, -1), (1.0, 2), (0, 2.5), ("0", 3), (0, None)],
    ids=["reversed", "negative-stop", "float-start", "float-stop", "str", "none"],
)
def test_constructor_rejects_bad_ranges_naming_them(bad: tuple[object, object]) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        IntervalSet([(0, 1), bad])  # type: ignore[list-item]


def test_range_errors_and_empty() -> None:
    with pytest.raises(ValueError, match="start is after stop"):
        IntervalSet.range(5, 4)
    assert IntervalSet.range(7, 7) == IntervalSet.empty()
    assert IntervalSet.range(7, 7).is_empty


# -- reading ----------------------------------------------------------------------------------


def test_reading_properties() -> None:
    s = IntervalSet([(20, 30), (0, 10)])
    assert s.length == 20
    assert s.n_ranges == 2
    assert s.ranges == ((0, 10), (20, 30))
    assert list(s) == [(0, 10), (20, 30)]
    assert (s.start, s.stop) == (0, 30)
    assert s
    assert not s.is_empty
    assert not hasattr(s, "__len__"), "len() would be ambiguous: events or ranges?"
    e = IntervalSet.empty()
    assert e.length == 0
    assert e.n_ranges == 0
    assert e.ranges == ()
    assert list(e) == []
    assert not e
    assert e.is_empty


def test_start_stop_of_empty_raise() -> None:
    with pytest.raises(ValueError, match="empty"):
        _ = IntervalSet.empty().start
    with pytest.raises(ValueError, match="empty"):
        _ = IntervalSet.empty().stop


def test_repr() -> None:
    assert repr(IntervalSet([(20, 30), (0, 10)])) == "IntervalSet([(0, 10), (20, 30)])"
    assert repr(IntervalSet.empty()) == "IntervalSet([])"
    s = IntervalSet([(3, 9), (12, 13)])
    assert eval(repr(s)) == s


def test_hashable_and_usable_as_key() -> None:
    d = {IntervalSet.range(0, 10): "a"}
    assert d[IntervalSet([(0, 5), (5, 10)])] == "a"
    assert IntervalSet.range(0, 10) != IntervalSet.range(0, 11)
    assert IntervalSet.range(0, 10) != [(0, 10)]


@given(interval_sets(MAX_EVENT))
def test_views_start_stop(s: IntervalSet) -> None:
    check_invariant(s)
    model = events(s)
    assert s.length == len(model)
    if model:
        assert s.start == min(model)
        assert s.stop == max(model) + 1


@given(interval_sets(MAX_EVENT))
def test_contains(s: IntervalSet) -> None:
    model = events(s)
    for e in range(-2, MAX_EVENT + 2):
        assert (e in s) == (e in model)
    assert "3" not in s
    assert 3.0 not in s


@given(interval_sets(MAX_EVENT), interval_sets(MAX_EVENT))
def test_eq_and_hash_follow_the_events(a: IntervalSet, b: IntervalSet) -> None:
    assert (a == b) == (events(a) == events(b))
    rebuilt = IntervalSet.from_events(events(a))
    assert rebuilt == a
    assert hash(rebuilt) == hash(a)


# -- set algebra ------------------------------------------------------------------------------


def check_binary_operations(a: IntervalSet, b: IntervalSet) -> None:
    """``|``, ``&``, ``-``, ``overlaps``, ``issubset`` of ``a`` and ``b`` against the model."""
    ea, eb = events(a), events(b)
    before = (a.ranges, b.ranges)
    results = {
        "|": (a | b, a.union(b), ea | eb),
        "&": (a & b, a.intersection(b), ea & eb),
        "-": (a - b, a.difference(b), ea - eb),
    }
    for op, (result, by_name, expected) in results.items():
        check_invariant(result)
        assert events(result) == expected, op
        assert by_name == result, op
    assert a.overlaps(b) == bool(ea & eb)
    assert a.overlap_length(b) == len(ea & eb) == b.overlap_length(a)
    assert a.issubset(b) == (ea <= eb)
    assert (a.ranges, b.ranges) == before, "an operation changed its operands"


@given(interval_sets(MAX_EVENT), interval_sets(MAX_EVENT))
def test_binary_operations_match_the_set_model(a: IntervalSet, b: IntervalSet) -> None:
    check_binary_operations(a, b)


def test_binary_operations_on_every_pair_of_small_ranges() -> None:
    # The single-range fast paths, exhaustively: every relative position of two ranges
    # (before, touching, overlapping, inside, equal, after), and with the empty set.
    small = [IntervalSet.empty()] + [
        IntervalSet.range(a, b) for a in range(7) for b in range(a + 1, 8)
    ]
    for a, b in itertools.product(small, repeat=2):
        check_binary_operations(a, b)


@given(dense_event_sets(MAX_EVENT), dense_event_sets(MAX_EVENT))
def test_binary_operations_on_many_ranges(ea: set[int], eb: set[int]) -> None:
    # Both operands with dozens of ranges: the linear-merge paths, which small operands
    # (spliced in with bisect) do not reach.
    check_binary_operations(IntervalSet.from_events(ea), IntervalSet.from_events(eb))


@given(interval_sets(MAX_EVENT), dense_event_sets(MAX_EVENT))
def test_binary_operations_few_ranges_against_many(a: IntervalSet, eb: set[int]) -> None:
    # A job or subjob (a few ranges) against a cache's content (many): the bisect-splice paths.
    b = IntervalSet.from_events(eb)
    check_binary_operations(a, b)
    check_binary_operations(b, a)


@given(
    st.lists(st.integers(0, 29), min_size=9, max_size=20, unique=True),
    st.integers(0, 20),
    st.integers(1, 19),
)
def test_binary_operations_fragmented_against_a_dozen_ranges(
    slots: list[int], offset: int, width: int
) -> None:
    # A cache's content (hundreds of ranges) against an eviction of 9 to 20 ranges: more
    # than the small-operand bound, but small next to the other operand.
    big = IntervalSet((e, e + 1) for e in range(0, 1200, 3))
    small = IntervalSet((40 * k + offset, 40 * k + offset + width) for k in slots)
    assert small.n_ranges == len(slots)
    check_binary_operations(big, small)
    check_binary_operations(small, big)


@given(
    st.one_of(interval_sets(MAX_EVENT), dense_event_sets(MAX_EVENT).map(IntervalSet.from_events)),
    st.lists(interval_sets(MAX_EVENT), max_size=8),
)
def test_overlaps_each_is_overlaps_of_each(big: IntervalSet, small: list[IntervalSet]) -> None:
    """One call for many sets (the split choice's test of every running subjob against a
    node's cache) answers what ``overlaps`` answers of each, and what the model does."""
    model = events(big)
    assert big.overlaps_each(small) == [s.overlaps(big) for s in small]
    assert big.overlaps_each(small) == [bool(model & events(s)) for s in small]


@given(interval_sets(MAX_EVENT), interval_sets(MAX_EVENT))
def test_list_operations_are_union_difference_and_intersection(
    a: IntervalSet, b: IntervalSet
) -> None:
    """The list operations the cache directory keeps each node's content with: ``splice_in``
    is ``|`` and ``cut_out`` is ``-`` (in place, each returning the events left), and
    ``overlap_count`` is the length of ``&``."""
    assert overlap_count(a._starts, a._stops, b._starts, b._stops) == (a & b).length
    starts, stops = list(a._starts), list(a._stops)
    length = splice_in(starts, stops, b._starts, b._stops, a.length)
    assert IntervalSet._make(starts, stops) == a | b
    assert length == (a | b).length
    length = cut_out(starts, stops, b._starts, b._stops, length)
    assert IntervalSet._make(starts, stops) == a - b
    assert length == (a - b).length


def test_overlaps_and_issubset_examples() -> None:
    comb = IntervalSet([(0, 2), (4, 6), (8, 10)])
    gaps = IntervalSet([(2, 4), (6, 8)])
    assert not comb.overlaps(gaps)
    assert not gaps.overlaps(comb)
    assert comb.overlaps(IntervalSet([(3, 5)]))
    assert not comb.overlaps(IntervalSet.empty())
    assert IntervalSet([(4, 6), (9, 10)]).issubset(comb)
    assert not IntervalSet.range(4, 7).issubset(comb)
    assert not IntervalSet.range(1, 5).issubset(comb), "spans a gap"
    assert IntervalSet.empty().issubset(IntervalSet.empty())
    assert comb.issubset(comb)


@given(interval_sets(MAX_EVENT), interval_sets(MAX_EVENT), interval_sets(MAX_EVENT))
def test_chained_operations_leave_operands_intact(
    a: IntervalSet, b: IntervalSet, c: IntervalSet
) -> None:
    # Results that reuse an operand (``x | empty is x``) must stay correct when fed onward.
    ea, eb, ec = events(a), events(b), events(c)
    assert events((a | b) - c) == (ea | eb) - ec
    assert events((a - b) | (b & c)) == (ea - eb) | (eb & ec)
    assert events(a) == ea
    assert events(b) == eb
    assert events(c) == ec


@given(interval_sets(MAX_EVENT), st.integers(-5, MAX_EVENT + 5), st.integers(-5, MAX_EVENT + 5))
def test_clip(s: IntervalSet, start: int, stop: int) -> None:
    before = s.ranges
    c = s.clip(start, stop)
    check_invariant(c)
    assert events(c) == {e for e in events(s) if start <= e < stop}
    assert s.ranges == before


@given(interval_sets(MAX_EVENT), st.integers(-5, MAX_EVENT + 5), st.integers(0, 40))
def test_gaps_are_the_range_less_the_set(s: IntervalSet, start: int, size: int) -> None:
    gaps = s.gaps(start, start + size)
    assert IntervalSet(gaps).ranges == tuple(gaps)  # sorted, disjoint, not touching
    assert events(IntervalSet(gaps)) == set(range(start, start + size)) - events(s)


# -- cutting ----------------------------------------------------------------------------------


@given(interval_sets(MAX_EVENT), st.integers(-5, MAX_EVENT + 5))
def test_split_at(s: IntervalSet, point: int) -> None:
    before = s.ranges
    left, right = s.split_at(point)
    check_invariant(left)
    check_invariant(right)
    model = events(s)
    assert events(left) == {e for e in model if e < point}
    assert events(right) == {e for e in model if e >= point}
    assert s.ranges == before


@given(interval_sets(MAX_EVENT))
def test_event_at(s: IntervalSet) -> None:
    ordered = sorted(events(s))
    for k, e in enumerate(ordered):
        assert s.event_at(k) == e
    for k in (-1, len(ordered), len(ordered) + 7):
        with pytest.raises(IndexError):
            s.event_at(k)


@given(interval_sets(MAX_EVENT), st.data())
def test_head(s: IntervalSet, data: st.DataObject) -> None:
    n = data.draw(st.integers(-3, s.length + 3), label="n")
    before = s.ranges
    first, rest = s.head(n)
    check_invariant(first)
    check_invariant(rest)
    ordered = sorted(events(s))
    k = min(max(n, 0), len(ordered))
    assert events(first) == set(ordered[:k])
    assert events(rest) == set(ordered[k:])
    assert s.ranges == before
    dropped = s.drop(n)  # the rest alone
    check_invariant(dropped)
    assert dropped == rest
    assert dropped.length == rest.length


@given(interval_sets(MAX_EVENT), st.integers(1, 40), st.integers(1, 60))
def test_split_even(s: IntervalSet, parts: int, min_events: int) -> None:
    pieces = s.split_even(parts, min_events)
    n = s.length
    if n == 0:
        assert pieces == []
        return
    expected_count = max(1, min(parts, n // min_events))
    assert len(pieces) == expected_count
    for p in pieces:
        check_invariant(p)
        assert p
    sizes = [p.length for p in pieces]
    assert sum(sizes) == n
    assert max(sizes) - min(sizes) <= 1
    if n >= min_events:
        assert min(sizes) >= min_events
    # Consecutive events, in ascending order: concatenating the pieces gives the sorted events.
    concatenated = [e for p in pieces for e in sorted(events(p))]
    assert concatenated == sorted(events(s))


def test_split_even_examples() -> None:
    s = IntervalSet([(0, 5), (10, 15)])
    assert [p.ranges for p in s.split_even(3)] == [((0, 4),), ((4, 5), (10, 12)), ((12, 15),)]
    assert [p.length for p in IntervalSet.range(0, 10).split_even(4)] == [3, 3, 2, 2]
    # min_events bounds the number of pieces: 10 events, at least 4 each -> 2 pieces.
    assert [p.length for p in IntervalSet.range(0, 10).split_even(5, min_events=4)] == [5, 5]
    # Fewer events than min_events: still one piece.
    assert IntervalSet.range(0, 3).split_even(4, min_events=10) == [IntervalSet.range(0, 3)]
    assert IntervalSet.range(0, 3).split_even(10) == [
        IntervalSet.range(0, 1),
        IntervalSet.range(1, 2),
        IntervalSet.range(2, 3),
    ]
    assert IntervalSet.empty().split_even(3) == []


@pytest.mark.parametrize(("parts", "min_events"), [(0, 1), (-1, 1), (2, 0), (2, -3)])
def test_split_even_rejects_nonpositive(parts: int, min_events: int) -> None:
    with pytest.raises(ValueError, match="parts" if parts < 1 else "min_events"):
        IntervalSet.range(0, 10).split_even(parts, min_events)


def test_head_and_event_at_examples() -> None:
    s = IntervalSet([(0, 3), (10, 12), (20, 25)])
    assert [s.event_at(k) for k in range(s.length)] == [0, 1, 2, 10, 11, 20, 21, 22, 23, 24]
    first, rest = s.head(4)
    assert first == IntervalSet([(0, 3), (10, 11)])
    assert rest == IntervalSet([(11, 12), (20, 25)])
    assert s.head(3) == (IntervalSet.range(0, 3), IntervalSet([(10, 12), (20, 25)]))
    assert s.head(0) == (IntervalSet.empty(), s)
    assert s.head(-1) == (IntervalSet.empty(), s)
    assert s.head(100) == (s, IntervalSet.empty())
    assert IntervalSet.range(5, 10).head(2) == (IntervalSet.range(5, 7), IntervalSet.range(7, 10))
    with pytest.raises(IndexError):
        IntervalSet.empty().event_at(0)
