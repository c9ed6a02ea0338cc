"""The index of servers by free slots that the min-cost flow builds its batches from
(:class:`FreeSlots`): after any sequence of changes it answers what a pass over a plain
server -> free slots table does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from datasched.policies.cosched.freeslots import FreeSlots

changes = st.lists(st.tuples(st.integers(0, 12), st.integers(-1, 4)), max_size=60)


def check(index: FreeSlots, table: dict[int, int]) -> None:
    """Every answer of ``index`` against a pass over ``table`` (server -> free slots)."""
    free = {n: c for n, c in table.items() if c > 0}
    assert index.as_dict() == dict(sorted(free.items()))
    assert list(index.as_dict()) == sorted(free)
    assert len(index) == len(free)
    assert index.total() == sum(free.values())
    assert index.counts() == sorted(set(free.values()))
    for c in range(-1, 6):
        assert list(index.servers(c)) == sorted(n for n, k in free.items() if k == c)
    for n in range(14):
        assert index.free(n) == free.get(n, 0)
    assert index.lowest() == (min(free) if free else None)
    assert dict(index.items()) == free


@settings(max_examples=200, deadline=None)
@given(start=changes, steps=changes)
def test_the_index_answers_what_a_pass_over_every_server_does(
    start: list[tuple[int, int]], steps: list[tuple[int, int]]
) -> None:
    """Built from a table, then changed one server at a time (slots filling, freeing, a
    server going to none or below): checked after every change."""
    table = dict(start)
    index = FreeSlots(table.items())
    check(index, table)
    for node, free in steps:
        index.set(node, free)
        table[node] = free
        check(index, table)


def test_an_empty_index_has_no_server() -> None:
    index = FreeSlots()
    assert index.lowest() is None
    assert index.counts() == []
    assert len(index) == 0
    index.set(3, 0)
    index.set(4, -2)
    assert len(index) == 0
    index.set(5, 2)
    index.set(1, 2)
    index.set(7, 1)
    assert list(index.servers(2)) == [1, 5]
    assert index.lowest() == 1
    index.set(1, 1)
    assert list(index.servers(1)) == [1, 7]
    assert list(index.servers(2)) == [5]
