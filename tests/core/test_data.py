"""The data space (files laid end to end, bytes per file) and whole-file caches."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from datasched.core.cache import RangeCache, new_cache
from datasched.core.data import CacheGrain, DataError, DataSpace, FileSpec
from datasched.core.filecache import FileCache
from datasched.core.intervals import IntervalSet
from datasched.core.replacement import FIFO


def r(a: int, b: int) -> IntervalSet:
    return IntervalSet.range(a, b)


def three_files() -> DataSpace:
    """Files of 100, 50 (twice as dense) and 200 events: [0, 100), [100, 150), [150, 350)."""
    space = DataSpace()
    space.add_dataset(
        "d",
        [FileSpec("a", 100, 1000), FileSpec("b", 50, 1000), FileSpec("c", 200, 2000)],
        metadata={"year": 2004},
    )
    return space


def test_files_are_laid_end_to_end_and_found_by_event() -> None:
    space = three_files()
    assert [(f.start, f.stop) for f in space.files] == [(0, 100), (100, 150), (150, 350)]
    assert space.n_events == 350
    assert space.n_bytes == 4000
    assert [space.file_at(e) for e in (0, 99, 100, 149, 150, 349)] == [0, 0, 1, 1, 2, 2]
    with pytest.raises(IndexError):
        space.file_at(350)
    assert space.files_in(r(90, 160)) == [0, 1, 2]
    assert space.whole_files(r(120, 130)) == r(100, 150)
    assert space.full_files(r(50, 200)) == r(100, 150)
    assert space.boundaries == [0, 100, 150]
    assert space.datasets["d"].metadata == {"year": 2004}
    assert space.dataset_events("d") == r(0, 350)


def test_bytes_are_per_file() -> None:
    space = three_files()
    assert space.uniform_bytes_per_event is None
    # 10 events of file a (10 B each) and 10 of file b (20 B each).
    assert space.bytes_of(r(90, 110)) == pytest.approx(300.0)
    # A whole-file cache spends both files on them.
    assert space.cached_bytes(r(90, 110)) == 2000


def test_a_file_named_twice_keeps_its_events() -> None:
    space = three_files()
    again = space.add_dataset("e", [FileSpec("b", 50, 1000), FileSpec("z", 10, 10)])
    assert again.files == (1, 3)
    assert space.files[3].start == 350
    assert space.n_events == 360


def test_uniform_space_is_range_grained_unless_cut_into_files() -> None:
    whole = DataSpace.uniform(1000, 600e3)
    assert whole.grain is CacheGrain.RANGE
    assert whole.boundaries == []
    assert whole.uniform_bytes_per_event == 600e3
    cut = DataSpace.uniform(1000, 600e3, file_events=300)
    assert cut.grain is CacheGrain.FILE
    assert [f.n_events for f in cut.files] == [300, 300, 300, 100]
    assert cut.uniform_bytes_per_event == 600e3
    assert isinstance(new_cache(whole, 600e3 * 10), RangeCache)
    assert isinstance(new_cache(cut, 600e3 * 10), FileCache)


def test_bad_descriptions_name_the_field() -> None:
    with pytest.raises(DataError, match="n_events"):
        FileSpec("x", -1, 10)
    with pytest.raises(DataError, match="n_bytes"):
        FileSpec("x", 1, -10)
    with pytest.raises(DataError, match="bytes_per_event"):
        DataSpace.uniform(10, 0.0)
    space = DataSpace(CacheGrain.RANGE)
    space.add_dataset("d", [FileSpec("a", 10, 10), FileSpec("b", 10, 20)])
    with pytest.raises(ValueError, match="grain"):
        new_cache(space, 100)


def test_file_cache_holds_pins_and_evicts_whole_files() -> None:
    space = three_files()
    cache = FileCache(space, 3000)
    added, evicted = cache.insert(r(10, 20), stamp=1.0)  # touches file a only
    assert added == r(0, 100)
    assert not evicted
    assert cache.used_bytes == 1000
    cache.insert(r(100, 101), stamp=2.0)  # file b
    assert cache.content == r(0, 150)
    token = cache.pin(r(0, 1))  # file a may not go
    added, evicted = cache.insert(r(200, 210), stamp=3.0)  # file c: 2000 B, 1000 B short
    assert added == r(150, 350)
    assert evicted == r(100, 150)  # b, the only unpinned one
    cache.unpin(token)
    cache.touch(r(0, 5), stamp=4.0)  # a is now the most recent
    assert cache.partition(r(90, 160)) == (r(90, 100) | r(150, 160), r(100, 150))
    gone = cache.evict(r(160, 161))
    assert gone == r(150, 350)
    assert cache.used_bytes == 1000
    assert cache.clear() == r(0, 100)
    assert cache.used_bytes == 0


def test_file_cache_never_holds_more_than_fits() -> None:
    space = three_files()
    cache = FileCache(space, 1500)
    added, _ = cache.insert(r(0, 350), stamp=1.0)  # a (1000 B) fits, then b does not, c not
    assert added == r(0, 100)
    assert cache.used_bytes <= 1500
    fetch = cache.begin_fetch(r(120, 121))
    added, evicted = cache.end_fetch(fetch, r(120, 121), stamp=2.0)
    assert added == r(100, 150)
    assert evicted == r(0, 100)


@given(
    st.lists(st.tuples(st.integers(0, 349), st.integers(1, 60), st.booleans()), max_size=40),
    st.sampled_from([1000, 2500, 4000]),
    st.booleans(),
)
def test_file_cache_stays_within_capacity_and_whole(
    ops: list[tuple[int, int, bool]], capacity: int, fifo: bool
) -> None:
    space = three_files()
    cache = FileCache(space, capacity, FIFO) if fifo else FileCache(space, capacity)
    held = IntervalSet()
    for t, (start, n, touch) in enumerate(ops):
        data = r(start, min(start + n, 350))
        if touch:
            cache.touch(data, float(t))
            continue
        added, evicted = cache.insert(data, float(t))
        assert not (added & evicted)
        held = (held - evicted) | added
        assert cache.content == held
        assert cache.used_bytes == sum(f.n_bytes for f in space.files if held.clip(f.start, f.stop))
        assert cache.used_bytes <= capacity
        # Whole files only.
        assert space.whole_files(held) == held
