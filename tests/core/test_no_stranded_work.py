"""No work is ever stranded, under every registered policy: random arrivals, progress, stops
the engine makes on its own (a worker restarting), preemptions and splits the policy asks for,
node losses and joins, cancellations, wake-ups. Hypothesis plays the engine; afterwards the
cluster is driven to the end, and every event of every job must have been processed exactly
once (cancelled jobs: at most once), every job must have ended, and nothing may be left.

The scheduler refuses to stand still with work left (it raises naming the policy), so a
policy that forgets work it was given back fails here, whatever the scenario.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from clusters import scheduler, space
from datasched.core.actions import (
    Assign,
    Evict,
    Fetch,
    JobCompleted,
    JobFailed,
    JobHeld,
    JobReleased,
    Pin,
    Preempt,
    Replicate,
    Shrink,
    Start,
    Unpin,
    WakeAt,
)
from datasched.core.dispatch import EventPump
from datasched.core.events import (
    ArrivalsClosed,
    CacheChanged,
    Event,
    FetchDone,
    JobArrived,
    JobCancelled,
    NodeJoined,
    NodeLost,
    SubjobFinished,
    SubjobShrunk,
    SubjobStopped,
    Tick,
    TransferDone,
    WorkRequested,
)
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Subjob
from datasched.core.scheduler import Scheduler
from datasched.policies import available

POLICIES = sorted(available())
NODES = 3
SPACE = 600
_EMPTY = IntervalSet()


class FakeEngine:
    """The engine's side, reduced to books: what runs where and how far it got."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.now = 0.0
        self.running: dict[int, tuple[Subjob, int, bool]] = {}
        """Slot -> (subjob, events processed so far, whether it caches what it reads)."""
        self.down: set[int] = set()
        self.wakes: list[float] = []
        self.processed: dict[int, list[IntervalSet]] = {}
        self.ended: dict[int, str] = {}
        self.jobs: dict[int, Job] = {}
        self.cached: dict[int, IntervalSet] = {}
        self.held: dict[int, float] = {}
        """Job -> until when its policy holds it back (JobHeld, not yet JobReleased)."""
        self.closed = False
        self.pump = EventPump(sched, self)

    def send(self, event: Event) -> None:
        """The world's event, handled with its follow-ups in the engines' order."""
        self.pump.handle(event)

    # The actions (core.dispatch.ActionHandler): answers given at once are follow-ups.

    def on_start(self, action: Start | Assign) -> None:
        slot = action.slot
        assert slot not in self.running, f"slot {slot} started twice"
        assert self.sched.node_of(slot) not in self.down, "work sent to a lost node"
        self.running[slot] = (action.subjob, 0, action.cache_fill)

    def on_preempt(self, action: Preempt) -> None:
        self.pump.emit(self.leave(action.slot, finished=False))

    def on_shrink(self, action: Shrink) -> None:
        sj, done, fill = self.running[action.slot]
        _, rest = sj.data.head(done)
        released = action.release & rest
        self.running[action.slot] = (sj._replace(data=sj.data - released), done, fill)
        self.pump.emit(SubjobShrunk(self.now, action.subjob_id, action.slot, released))

    def on_wake_at(self, action: WakeAt) -> None:
        self.wakes.append(action.time)

    def on_job_completed(self, action: JobCompleted) -> None:
        self.ended[action.job_id] = "completed"

    def on_job_failed(self, action: JobFailed) -> None:
        self.ended[action.job_id] = "failed"
        self.held.pop(action.job_id, None)  # cancelled while held: never released

    def on_job_held(self, action: JobHeld) -> None:
        assert action.job_id not in self.ended, "a job held after it ended"
        self.held[action.job_id] = action.until

    def on_job_released(self, action: JobReleased) -> None:
        assert self.held.pop(action.job_id, None) is not None, "released, never held"

    def on_fetch(self, action: Fetch) -> None:
        self.pump.emit(FetchDone(self.now, action.node, action.data, action.data))

    def on_replicate(self, action: Replicate) -> None:
        self.pump.emit(TransferDone(self.now, action.source, action.node, action.data, action.data))

    def on_pin(self, action: Pin) -> None:
        pass  # the books keep no cache contents beyond what subjobs add

    def on_unpin(self, action: Unpin) -> None:
        pass

    def on_evict(self, action: Evict) -> None:
        self.pump.emit(CacheChanged(self.now, action.node, evicted=action.data))

    def leave(self, slot: int, *, finished: bool) -> SubjobFinished | SubjobStopped:
        sj, done, fill = self.running.pop(slot)
        processed, remaining = (sj.data, _EMPTY) if finished else sj.data.head(done)
        self.processed.setdefault(sj.job_id, []).append(processed)
        node = self.sched.node_of(slot)
        added = _EMPTY
        if fill:
            added = processed - self.cached.get(node, _EMPTY)
            self.cached[node] = self.cached.get(node, _EMPTY) | added
        if finished:
            return SubjobFinished(self.now, sj.subjob_id, slot, added)
        return SubjobStopped(self.now, sj.subjob_id, slot, remaining, added)


def machine_for(policy: str) -> type[RuleBasedStateMachine]:
    class NoStrandedWork(RuleBasedStateMachine):
        engine: FakeEngine

        @initialize(
            slots=st.integers(1, 2),
            file_events=st.sampled_from([0, 0, 25]),
            cache_events=st.sampled_from([0, 100, 400]),
            hot=st.sampled_from([None, 1, 2]),
        )
        def build(self, slots: int, file_events: int, cache_events: int, hot: int | None) -> None:
            sched = scheduler(
                policy,
                NODES,
                cache_events,
                min_subjob=3,
                slots=slots,
                data=space(file_events, n_events=SPACE),
                params=_small(policy),
                hot=hot,
            )
            self.engine = FakeEngine(sched)
            self.next_job = 0

        def later(self, dt: float) -> None:
            self.engine.now += dt

        @rule(start=st.integers(0, SPACE - 1), size=st.integers(1, 200), dt=st.floats(0, 50))
        def arrive(self, start: int, size: int, dt: float) -> None:
            if self.engine.closed:
                return
            self.later(dt)
            job = Job(
                self.next_job, self.engine.now, IntervalSet.range(start, min(start + size, SPACE))
            )
            self.next_job += 1
            self.engine.jobs[job.job_id] = job
            self.engine.send(JobArrived(self.engine.now, job))

        @rule(dt=st.floats(0, 50))
        def close_arrivals(self, dt: float) -> None:
            """The jobs file's last job is in: nothing held may wait for a period's end."""
            self.later(dt)
            self.engine.closed = True
            self.engine.send(ArrivalsClosed(self.engine.now))
            assert not self.engine.held, f"{policy}: jobs held once no more can arrive"

        def pick(self, k: int) -> int | None:
            slots = sorted(self.engine.running)
            return slots[k % len(slots)] if slots else None

        @rule(k=st.integers(0, 10), events=st.integers(1, 40), dt=st.floats(0, 50))
        def progress(self, k: int, events: int, dt: float) -> None:
            self.later(dt)
            slot = self.pick(k)
            if slot is not None:
                sj, done, fill = self.engine.running[slot]
                self.engine.running[slot] = (sj, min(done + events, sj.data.length - 1), fill)

        @rule(k=st.integers(0, 10), dt=st.floats(0, 50))
        def finish(self, k: int, dt: float) -> None:
            self.later(dt)
            slot = self.pick(k)
            if slot is not None:
                self.engine.send(self.engine.leave(slot, finished=True))

        @rule(k=st.integers(0, 10), dt=st.floats(0, 50))
        def engine_stops(self, k: int, dt: float) -> None:
            """A worker restarted: its packets in flight are lost, the rest goes back."""
            self.later(dt)
            slot = self.pick(k)
            if slot is not None:
                self.engine.send(self.engine.leave(slot, finished=False))

        @rule(node=st.integers(0, NODES - 1), exact=st.booleans(), dt=st.floats(0, 50))
        def lose(self, node: int, exact: bool, dt: float) -> None:
            self.later(dt)
            engine = self.engine
            if node in engine.down:
                return
            engine.down.add(node)
            remaining = []
            for slot in engine.sched.slots_of(node):
                if slot not in engine.running:
                    continue
                sj, done, _ = engine.running.pop(slot)
                if exact:
                    processed, rest = sj.data.head(done)
                    engine.processed.setdefault(sj.job_id, []).append(processed)
                    remaining.append((slot, rest))
                # Not exact: the engine cannot tell, nothing of it counts.
            engine.cached.pop(node, None)
            engine.send(NodeLost(engine.now, node, tuple(remaining)))

        @rule(node=st.integers(0, NODES - 1), dt=st.floats(0, 50))
        def join(self, node: int, dt: float) -> None:
            self.later(dt)
            engine = self.engine
            if node in engine.down:
                engine.down.discard(node)
                engine.send(NodeJoined(engine.now, engine.sched.topology.nodes[node]))

        @rule(dt=st.floats(0, 4000))
        def tick(self, dt: float) -> None:
            self.later(dt)
            self.deliver_wakes()

        @rule(k=st.integers(0, 10))
        def request(self, k: int) -> None:
            idle = self.engine.sched.idle_slots
            if idle:
                self.engine.send(WorkRequested(self.engine.now, idle[k % len(idle)]))

        @rule(k=st.integers(0, 30))
        def cancel(self, k: int) -> None:
            jobs = sorted(self.engine.sched.jobs)
            if jobs and k < 3:  # now and then
                self.engine.send(JobCancelled(self.engine.now, jobs[k % len(jobs)]))

        def deliver_wakes(self) -> None:
            engine = self.engine
            due = sorted(t for t in engine.wakes if t <= engine.now)
            engine.wakes = [t for t in engine.wakes if t > engine.now]
            for _ in due:
                engine.send(Tick(engine.now))

        @invariant()
        def books_valid(self) -> None:
            """The scheduler's own invariants hold after every step, whole."""
            if hasattr(self, "engine"):
                self.engine.sched.validate()

        @invariant()
        def books_agree(self) -> None:
            if not hasattr(self, "engine"):
                return
            engine = self.engine
            assert set(engine.sched.running) == set(engine.running)
            for slot, (sj, _, _) in engine.running.items():
                assert engine.sched.running[slot].subjob.data == sj.data
            for pieces in engine.processed.values():
                union = _EMPTY
                for piece in pieces:
                    assert not (piece & union), "events processed twice"
                    union = union | piece

        def teardown(self) -> None:
            if not hasattr(self, "engine"):
                return
            engine = self.engine
            # First with the lost nodes still gone (work must not wait for them), then all
            # back. With every node gone, one comes back first.
            if len(engine.down) == NODES:
                self.join(min(engine.down), 0.0)
            self.drain()
            for node in sorted(engine.down):
                self.join(node, 0.0)
            self.drain()

        def drain(self) -> None:
            engine = self.engine
            for _ in range(10_000):
                if not engine.sched.jobs:
                    break
                if engine.running:
                    engine.now += 1.0
                    engine.send(engine.leave(min(engine.running), finished=True))
                elif engine.wakes:
                    engine.now = max(engine.now, min(engine.wakes))
                    self.deliver_wakes()
                else:
                    pytest.fail(f"{policy}: jobs {sorted(engine.sched.jobs)} never end")
            assert not engine.sched.jobs, f"{policy}: work left after 10,000 steps"
            assert not {j for j in engine.held if engine.ended.get(j) == "completed"}
            for job_id, job in engine.jobs.items():
                union = _EMPTY
                for piece in engine.processed.get(job_id, []):
                    union = union | piece
                assert job_id in engine.ended, f"job {job_id} never ended"
                if engine.ended[job_id] == "completed":
                    assert union == job.data, f"job {job_id}: events lost"
                else:
                    assert union.issubset(job.data)

    NoStrandedWork.__name__ = f"NoStrandedWork_{policy.replace('-', '_')}"
    return NoStrandedWork


def _small(policy: str) -> dict[str, Any]:
    """Parameters that make a policy's special rules fire within a short scenario."""
    if policy == "delayed":
        return {"period_h": 0.5, "stripe_events": 50}
    if policy == "out-of-order":
        return {"fairness_h": 0.2, "replicate_after": 2}
    if policy == "basic-packetizer":
        return {"max_workers_per_node": 1}  # workers refused, the limit set aside when stuck
    if policy == "adaptive-packetizer":
        # Resource scheduling: queries get some of the slots, which serve them by weight.
        return {"priorities": "default=1", "calibration_events": 5}
    return {}


@pytest.mark.parametrize("policy", POLICIES)
def test_no_work_is_ever_stranded(policy: str) -> None:
    machine = machine_for(policy)
    machine.TestCase.settings = settings(
        max_examples=60,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine.TestCase().runTest()
