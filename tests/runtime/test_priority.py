"""Packets computed at their session's nice value (runtime/priority.py): the thread's value
for the packet's duration, its own after it, and nothing changed where the OS would not let
the thread go back."""

from __future__ import annotations

import os
import resource
import threading
from typing import Any

import pytest

from datasched.runtime.priority import NICE_UNAVAILABLE, can_lower_to, packet_priority

pytestmark = pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no thread priorities")


def in_a_thread(nice: int | None) -> dict[str, Any]:
    """Run a packet's block at ``nice`` in a new thread; what its priority was and said."""
    seen: dict[str, Any] = {}

    def run() -> None:
        tid = threading.get_native_id()
        seen["own"] = os.getpriority(os.PRIO_PROCESS, tid)
        with packet_priority(nice) as note:
            seen["during"] = os.getpriority(os.PRIO_PROCESS, tid)
            seen["note"] = note
        seen["after"] = os.getpriority(os.PRIO_PROCESS, tid)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return seen


def test_a_packet_runs_at_its_nice_value_and_the_thread_returns_to_its_own() -> None:
    seen = in_a_thread(15)
    if can_lower_to(seen["own"]):
        assert (seen["during"], seen["note"]) == (15, "")
    else:  # unprivileged: the way back is not allowed, so nothing changes
        assert (seen["during"], seen["note"]) == (seen["own"], NICE_UNAVAILABLE)
    assert seen["after"] == seen["own"]
    assert in_a_thread(None)["during"] == seen["own"]  # no value: left as it is


def test_without_privilege_nothing_changes_and_the_note_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(resource, "getrlimit", lambda _: (0, 0))  # RLIMIT_NICE 0
    assert not can_lower_to(0)
    assert not can_lower_to(19)
    seen = in_a_thread(10)
    assert (seen["during"], seen["after"], seen["note"]) == (
        seen["own"],
        seen["own"],
        NICE_UNAVAILABLE,
    )
    monkeypatch.setattr(resource, "getrlimit", lambda _: (20, 20))  # down to nice 0
    assert can_lower_to(0)
    assert not can_lower_to(-1)
