"""The daemon merges packet results without running user code: numbers, containers, numpy
arrays and hist histograms are unpickled; any other class is refused by name."""

from __future__ import annotations

import pickle

import hist
import numpy as np
import pytest

from datasched.service.results import ResultRefused, merge_packets, safe_loads


class UserThing:
    """A class of the user's (as a processor's accumulator might be)."""


def test_histograms_arrays_and_mappings_merge() -> None:
    def packet(values: list[float]) -> bytes:
        h = hist.Hist.new.Reg(4, 0, 4, name="x").Double()
        h.fill(values)
        return pickle.dumps({"h": h, "n": len(values), "a": np.arange(3), "s": {"f1"}})

    merged = merge_packets([packet([0.5, 1.5]), None, packet([1.5, 3.5])])
    assert list(merged["h"].values()) == [1, 2, 0, 1]
    assert merged["n"] == 4 and list(merged["a"]) == [0, 2, 4] and merged["s"] == {"f1"}


def test_a_users_class_or_a_callable_is_refused_by_name() -> None:
    with pytest.raises(ResultRefused, match=r"test_results\.UserThing"):
        safe_loads(pickle.dumps({"x": UserThing()}))
    with pytest.raises(ResultRefused, match=r"posix\.system|os\.system"):
        safe_loads(b"cos\nsystem\n(S'true'\ntR.")
