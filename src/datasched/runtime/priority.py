"""OS priorities for packets (the PROOF paper §3.2): a packet of a session whose policy gives
it a nice value (``Policy.packet_nice``: 20 - the session's level, P̄ mapped to [1, 40]) is
computed at that nice value, where the OS allows it.

On Linux a nice value belongs to a thread, not to the whole process (``setpriority`` with a
thread's id), so a worker thread computing one group's packet takes that group's value for
the packet's duration and goes back to its own after it: the Dask worker's other threads
(another slot, the file fetches, the comms) keep theirs.

What the OS allows: any process may *raise* its niceness, but lowering it again (and going
below 0) needs privilege (root, ``CAP_SYS_NICE``, or an ``RLIMIT_NICE`` soft limit that
reaches the value). A thread that could not return to its own value would run every later
packet, of any group, at the lowered priority; so where the thread cannot go back, nothing
is changed and the run's notes say so once. The policy's fair share (a slot serves sessions
by CPU weight, round robin among the users of groups too low for a level of their own) then
does the work alone, as it does in the simulator.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["NICE_UNAVAILABLE", "can_lower_to", "packet_priority", "thread_nice"]

NICE_UNAVAILABLE = (
    "nice values per group not applied on this worker: lowering a thread's nice value again "
    "needs privilege (root, CAP_SYS_NICE or RLIMIT_NICE); the policy's fair share of each "
    "slot does the work"
)


def thread_nice() -> int | None:
    """This thread's nice value (None where the OS has no per-thread priorities)."""
    if not hasattr(os, "getpriority"):
        return None
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def can_lower_to(nice: int) -> bool:
    """Whether a thread may lower its nice value to ``nice`` (from any higher one): every
    change of priority for a packet needs one such step, there or back."""
    if os.geteuid() == 0:
        return True
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    # RLIMIT_NICE: the lowest nice value allowed is 20 - the soft limit.
    return soft == resource.RLIM_INFINITY or 20 - soft <= nice


@contextmanager
def packet_priority(nice: int | None) -> Iterator[str]:
    """Run the block with this thread at ``nice`` (clamped to [-20, 19]) and restore the
    thread's own value after; yields a note for the run (empty when all went well, or when
    ``nice`` is None or the OS has no per-thread priorities)."""
    if nice is None or not hasattr(os, "setpriority"):
        yield ""
        return
    tid = threading.get_native_id()
    own = os.getpriority(os.PRIO_PROCESS, tid)
    target = max(-20, min(19, nice))
    if target == own:
        yield ""
        return
    if not can_lower_to(min(target, own)):
        yield NICE_UNAVAILABLE
        return
    try:
        os.setpriority(os.PRIO_PROCESS, tid, target)
    except OSError as exc:  # a container may forbid what the limits allow
        yield f"nice values per group not applied on this worker: {exc.strerror or exc}"
        return
    try:
        yield ""
    finally:
        os.setpriority(os.PRIO_PROCESS, tid, own)
