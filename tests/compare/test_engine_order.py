"""Both engines give a policy the same interleaving of events (docs/design.md, "The event
order"): the same scripted arrivals, completions, node losses and returns, fed through the
simulator's dispatch and through the runtime engine's (a fake clock, fake workers: no Dask),
must yield the same sequence of assignments, for every registered policy.

The worlds are made to agree so that only the order can differ: processing so slow that a
stopped subjob has processed nothing in either engine, no node caches, and packets never sent
(the runtime's workers have no address). A simulator that answers a Preempt, a Shrink or an
Evict depth first (handling the answer inside the action loop, as it once did) gives other
sequences, and :func:`test_depth_first_order_is_caught` checks that this test sees it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol, cast

import pytest

from datasched.core.actions import Assign, Evict, Preempt, Shrink, Start
from datasched.core.data import DataSpace
from datasched.core.dispatch import apply
from datasched.core.events import Event, JobArrived, NodeJoined, Tick
from datasched.core.intervals import IntervalSet
from datasched.core.model import CostModel, Job, Topology
from datasched.core.policy import JobView, Policy, SchedulerView
from datasched.core.scheduler import Scheduler
from datasched.policies import available, build_policy
from datasched.policies.ponce.fcfs import ProcessingFarm
from datasched.sim.engine import SimEngine

pytest.importorskip("distributed", reason="the runtime extra is not installed")

from datasched.runtime.engine import RuntimeEngine
from datasched.runtime.reports import JobReport
from datasched.runtime.streams import _JobRun

NODES, SLOTS, EVENTS = 3, 2, 600
CPU_S = 1e6
"""CPU seconds an event: so many that nothing is processed between the script's steps."""
_EMPTY = IntervalSet()
Assignment = tuple[str, int, int, tuple[tuple[int, int], ...], int]
"""(Start or Assign, subjob id, job id, its data's ranges, slot)."""

PARAMS: dict[str, dict[str, Any]] = {
    "delayed": {"period_h": 0.5, "stripe_events": 50},
    "out-of-order": {"fairness_h": 0.2, "replicate_after": 2},
    "adaptive-packetizer": {
        "priorities": "default=1",
        "calibration_events": 5,
        "min_packet_s": 2e7,
        "max_packet_s": 1e8,
    },
    "basic-packetizer": {"fraction": 2},
}


class PreemptingFarm(ProcessingFarm):
    """A farm that makes room for a new job by preempting the oldest running slot for one
    half of it while the other half starts on a free slot: one event's actions are a
    Preempt, then a Start (no registered policy mixes them so; the simulator's old depth-first
    answers started the replacement before the Start that follows the Preempt)."""

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        settled = [s for s, r in sched.running.items() if r.settled]
        if not (settled and sched.idle_slots and js.job.data.length >= 2):
            super().job_arrived(sched, js)
            return
        head, tail = js.job.data.head(js.job.data.length // 2)
        sched.preempt(min(settled), replacement=sched.new_subjob(js, head))
        sched.start(sched.new_subjob(js, tail), sched.idle_slots[0])


def build(policy: str | Policy) -> Scheduler:
    """Slow processing (:data:`CPU_S`) and no caches: the two engines' worlds agree."""
    return Scheduler(
        Topology.uniform(NODES, 0.0, slots=SLOTS),
        DataSpace.uniform(EVENTS, 600e3),
        policy if isinstance(policy, Policy) else build_policy(policy, **PARAMS.get(policy, {})),
        cost=CostModel(cpu_s_per_event=CPU_S),
        min_subjob_events=3,
    )


def record(log: list[Assignment], action: Start | Assign) -> None:
    sj = action.subjob
    kind = "start" if isinstance(action, Start) else "assign"
    log.append((kind, sj.subjob_id, sj.job_id, tuple(sj.data.ranges), action.slot))


class Driver(Protocol):
    assignments: list[Assignment]

    def advance(self, t: float) -> None: ...
    def arrive(self, job: Job) -> None: ...
    def busy_slots(self) -> list[int]: ...
    def finish(self, slot: int) -> None: ...
    def lose(self, node: int) -> None: ...
    def join(self, node: int) -> None: ...
    def jobs_left(self) -> int: ...
    def next_wake(self) -> float: ...


class SimDriver(SimEngine):
    """The simulator, stepped through its public steps; completions come from the script."""

    def __init__(self, sched: Scheduler) -> None:
        super().__init__(sched)
        self.assignments: list[Assignment] = []

    def on_start(self, action: Start | Assign) -> None:
        record(self.assignments, action)
        super().on_start(action)

    def advance(self, t: float) -> None:
        while self.peek() <= t:
            self.step()  # wake-ups (the subjobs' own ends lie far beyond the script)
        self.now = t

    def arrive(self, job: Job) -> None:
        self.submit(job, self.now)

    def busy_slots(self) -> list[int]:
        return [slot for slot, run in enumerate(self._runs) if run is not None]

    def finish(self, slot: int) -> None:
        self._pump.handle(self._leave(slot, finished=True))

    def lose(self, node: int) -> None:
        self.lose_node(node)

    def join(self, node: int) -> None:
        self.rejoin_node(node)

    def jobs_left(self) -> int:
        return len(self.scheduler.jobs)

    def next_wake(self) -> float:
        return self.peek()


class DepthFirstSim(SimDriver):
    """The simulator as it was: an action's answer handled inside the action loop."""

    def _now(self, event: Event) -> None:
        for action in self.scheduler.handle(event):
            apply(action, self)

    def on_preempt(self, action: Preempt) -> None:
        self._now(self._leave(action.slot, finished=False))

    def on_shrink(self, action: Shrink) -> None:
        self._now(self._shrink(action))

    def on_evict(self, action: Evict) -> None:
        self._now(self._evict(action.node, action.data))


class RuntimeDriver(RuntimeEngine):
    """The runtime engine without Dask: workers with no address (no packet is ever sent), a
    clock the script sets, jobs that write no output."""

    def __init__(self, sched: Scheduler) -> None:
        super().__init__(cast(Any, None), sched, [f"w{i}" for i in range(NODES)])
        self.assignments: list[Assignment] = []
        self.clock = 0.0
        for worker in self.workers:
            worker.up = True

    def now(self) -> float:
        return self.clock

    def on_start(self, action: Start | Assign) -> None:
        record(self.assignments, action)
        super().on_start(action)

    def _announce(self, node: int, start: Start | Assign) -> None:
        pass  # fake workers fetch nothing

    def _complete(self, jr: _JobRun) -> None:
        jr.report.status = "failed" if jr.failed else "completed"

    def advance(self, t: float) -> None:
        while self._ticks and min(self._ticks) <= t:
            due = min(self._ticks)
            self._ticks.remove(due)
            self.clock = max(self.clock, due)
            self._emit(Tick(self.clock))
            self._pump()
        self.clock = t

    def arrive(self, job: Job) -> None:
        report = JobReport(str(job.job_id), job.n_events)
        self._jobs[job.job_id] = _JobRun(cast(Any, None), job.job_id, job.data, report, None, None)
        self._emit(JobArrived(self.clock, job))
        self._pump()

    def busy_slots(self) -> list[int]:
        return sorted(i for i, s in self.slots.items() if s.subjob is not None)

    def finish(self, slot: int) -> None:
        s = self.slots[slot]
        assert s.subjob is not None
        s.processed, s.todo = s.subjob.data, _EMPTY
        s.cpu_s = s.subjob.data.length * CPU_S  # what its packets would have measured
        self._close(slot)
        self._pump()

    def lose(self, node: int) -> None:
        self._lose(node)
        self._pump()

    def join(self, node: int) -> None:
        self.workers[node].up = True
        self._emit(NodeJoined(self.clock, self.scheduler.topology.nodes[node]))
        self._pump()

    def jobs_left(self) -> int:
        return len(self.scheduler.jobs)

    def next_wake(self) -> float:
        return min(self._ticks, default=float("inf"))


@dataclass(frozen=True)
class Step:
    t: float
    what: str
    arg: int
    job: Job | None = None


def script(seed: int, n: int = 60) -> list[Step]:
    """Arrivals (often several at once), completions, node losses and returns."""
    rng = random.Random(seed)
    steps, t, job_id = [], 0.0, 0
    for _ in range(n):
        t += rng.choice([0.0, 0.0, 10.0, 200.0, 900.0])
        r = rng.random()
        if r < 0.45:
            start = rng.randrange(EVENTS - 1)
            stop = min(EVENTS, start + rng.randint(1, 250))
            steps.append(Step(t, "arrive", 0, Job(job_id, t, IntervalSet.range(start, stop))))
            job_id += 1
        elif r < 0.85:
            steps.append(Step(t, "finish", rng.randrange(10)))
        elif r < 0.93:
            steps.append(Step(t, "lose", rng.randrange(NODES)))
        else:
            steps.append(Step(t, "join", rng.randrange(NODES)))
    return steps


def play(driver: Driver, steps: list[Step]) -> list[Assignment]:
    down: set[int] = set()
    for step in steps:
        driver.advance(step.t)
        if step.what == "arrive":
            assert step.job is not None
            driver.arrive(step.job)
        elif step.what == "finish":
            running = driver.busy_slots()
            if running:
                driver.finish(running[step.arg % len(running)])
        elif step.what == "lose" and step.arg not in down and len(down) < NODES - 1:
            down.add(step.arg)
            driver.lose(step.arg)
        elif step.what == "join" and step.arg in down:
            down.discard(step.arg)
            driver.join(step.arg)
    for node in sorted(down):
        driver.join(node)
    t = steps[-1].t if steps else 0.0
    for _ in range(20_000):  # drain: finish what runs, deliver wake-ups
        if not driver.jobs_left():
            break
        running = driver.busy_slots()
        if running:
            t += 1.0
            driver.advance(t)
            driver.finish(running[0])
        else:
            t = max(t, driver.next_wake())
            driver.advance(t)
    assert not driver.jobs_left(), "work left after the drain"
    return driver.assignments


def compare(
    policy: str | type[Policy], seed: int, sim: type[SimDriver] = SimDriver
) -> tuple[bool, str]:
    steps = script(seed)

    def make() -> Scheduler:
        return build(policy() if isinstance(policy, type) else policy)

    got_sim = play(sim(make()), steps)
    got_runtime = play(RuntimeDriver(make()), steps)
    if got_sim == got_runtime:
        return True, ""
    i = next(
        (k for k, (a, b) in enumerate(zip(got_sim, got_runtime, strict=False)) if a != b),
        min(len(got_sim), len(got_runtime)),
    )
    return False, (
        f"{policy}, script {seed}: assignment #{i} differs: "
        f"simulator {got_sim[i : i + 2]}, runtime {got_runtime[i : i + 2]}"
    )


SEEDS = range(4)


@pytest.mark.parametrize("policy", sorted(available()))
def test_same_assignments_in_both_engines(policy: str) -> None:
    for seed in SEEDS:
        same, why = compare(policy, seed)
        assert same, why


def test_a_preempt_then_a_start_in_both_engines() -> None:
    for seed in SEEDS:
        same, why = compare(PreemptingFarm, seed)
        assert same, why


def test_depth_first_order_is_caught() -> None:
    """The comparison can fail: the simulator's old depth-first answers differ from the
    runtime's order when an event's actions are a Preempt, then a Start."""
    same, why = compare(PreemptingFarm, 0, DepthFirstSim)
    assert not same
    assert "differs" in why
