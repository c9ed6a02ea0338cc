"""The scheduler's checked invariants and its trace: :meth:`Scheduler.validate` catches each
kind of corrupted books with a message naming it, :meth:`Scheduler.resplit` refuses parts
that do not cover a subjob exactly, illegal changes of a subjob's state raise, and every
action carries the stimulus id of the event that caused it (docs/design.md, "Invariants and
tracing")."""

from __future__ import annotations

import io
import json
from bisect import insort
from collections.abc import Callable

import pytest

from clusters import scheduler, space
from datasched.core.actions import Preempt, Start
from datasched.core.events import Event, JobArrived, SubjobFinished, SubjobStopped, Tick
from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Part, Subjob, Topology
from datasched.core.policy import JobView, Policy, ReadMode, SchedulerView
from datasched.core.scheduler import Scheduler, SchedulerError, SubjobState
from datasched.core.trace import json_lines_sink, read_json_lines, story
from datasched.policies import build_policy
from datasched.policies.ponce.fcfs import ProcessingFarm
from datasched.sim.engine import SimEngine

R = IntervalSet.range


class Holding(Policy):
    """Starts a job's one subjob on a free slot, else holds it (for the tests to re-cut)."""

    name = "holding"

    def __init__(self) -> None:
        self.held: list[Subjob] = []

    def job_arrived(self, sched: SchedulerView, js: JobView) -> None:
        sj = sched.new_subjob(js, js.job.data)
        if sched.idle_slots:
            sched.start(sj, sched.idle_slots[0])
        else:
            self.held.append(sj)


def busy() -> tuple[Scheduler, Holding]:
    """One node of one slot running job 0 over [0, 100); job 1 over [200, 300) held."""
    policy = Holding()
    sched = Scheduler(Topology.uniform(1, 0), space(), policy, min_subjob_events=1)
    sched.handle(JobArrived(0.0, Job(0, 0.0, R(0, 100))))
    sched.handle(JobArrived(1.0, Job(1, 1.0, R(200, 300))))
    return sched, policy


def two_nodes() -> Scheduler:
    """Farm on two nodes of two slots; three jobs: three slots run, one is idle."""
    sched = scheduler("farm", 2, slots=2)
    for i in range(3):
        sched.handle(JobArrived(float(i), Job(i, float(i), R(100 * i, 100 * i + 50))))
    sched.validate()
    return sched


# -- validate() catches each kind of corruption ---------------------------------------------


def _done_events(s: Scheduler) -> None:
    s.jobs[0].done_events += 5


def _overlap(s: Scheduler) -> None:
    s.jobs[0].unissued = R(10, 20)


def _foreign(s: Scheduler) -> None:
    js = s.jobs[1]
    (sid,) = js.live
    js.live[sid] = js.live[sid]._replace(data=R(100, 150) | R(5000, 5001))


def _lost_subjob(s: Scheduler) -> None:
    js = s.jobs[1]
    (sid,) = js.live
    del js.live[sid]


def _idle_and_running(s: Scheduler) -> None:
    insort(s._idle, next(iter(s.running)))


def _nowhere(s: Scheduler) -> None:
    s._idle.clear()


def _parked_unknown(s: Scheduler) -> None:
    s._parked.add(999)


def _node_count(s: Scheduler) -> None:
    s.node_running[0] += 1


def _replacement(s: Scheduler) -> None:
    r = s.running[0]
    s._replacements[r.subjob.subjob_id] = r.subjob


def _split(s: Scheduler) -> None:
    s._splits[s.running[0].subjob.subjob_id] = s.idle_slots[0]


def _state_on_slot(s: Scheduler) -> None:
    s._states[s.running[0].subjob.subjob_id] = SubjobState.PARKED


def _running_record(s: Scheduler) -> None:
    s.running[0].state = SubjobState.STOPPING


def _stale_state(s: Scheduler) -> None:
    s._states[12345] = SubjobState.QUEUED


def _running_slots(s: Scheduler) -> None:
    s.jobs[0].running_slots.add(3)


def _queue_twice(s: Scheduler) -> None:
    s.job_queue.extend([2, 2])


CORRUPTIONS: dict[str, tuple[Callable[[Scheduler], None], str]] = {
    "processed count": (_done_events, "hold 50 events, but 45 are left"),
    "overlapping subjobs": (_overlap, "overlaps its other subjobs or unissued events"),
    "foreign events": (_foreign, "that are not the job's"),
    "a subjob forgotten": (
        _lost_subjob,
        "running slots [1] are not the slots its subjobs run on []",
    ),
    "idle and running": (_idle_and_running, "is running and idle at once"),
    "slot nowhere": (_nowhere, "is none of running, idle or reserved"),
    "parked disagree": (_parked_unknown, "parked subjobs [999] and the jobs' parked lists"),
    "node count": (_node_count, "node 0 counts 3 running slots, 2 run a subjob"),
    "replacement": (_replacement, "which is not stopping"),
    "split": (_split, "which is not shrinking"),
    "state off its slot": (_state_on_slot, "is parked but not in the parked list"),
    "record's state": (_running_record, "but its slot 0 says stopping"),
    "stale state": (_stale_state, "stale states: [12345]"),
    "running slots": (_running_slots, "running slots [0, 3] are not the slots"),
    "queued twice": (_queue_twice, "holds a job twice"),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_validate_names_each_corruption(kind: str) -> None:
    corrupt, message = CORRUPTIONS[kind]
    sched = two_nodes()
    corrupt(sched)
    with pytest.raises(SchedulerError, match="validate") as info:
        sched.validate()
    assert message in str(info.value)


def test_validation_on_checks_after_the_events() -> None:
    sched = scheduler("farm", 2, slots=2)
    assert sched.validating  # DATASCHED_VALIDATE=1 in tests/conftest.py
    sched.handle(JobArrived(0.0, Job(0, 0.0, R(0, 50))))
    sched.jobs[0].done_events += 1
    # Events that do not touch job 0 find it at the next full check, which comes within
    # (slots + live subjobs + jobs) / 2 events.
    events: list[Event] = [
        JobArrived(1.0, Job(1, 1.0, R(100, 150))),
        *(Tick(float(i)) for i in range(2, 10)),
    ]

    def handle_all() -> None:
        for event in events:
            sched.handle(event)

    with pytest.raises(SchedulerError, match="validate: job 0"):
        handle_all()


def test_validation_off_does_not_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATASCHED_VALIDATE", "0")
    sched = scheduler("farm", 2, slots=2)
    assert not sched.validating
    sched.handle(JobArrived(0.0, Job(0, 0.0, R(0, 50))))
    sched.jobs[0].done_events += 1
    sched.handle(JobArrived(1.0, Job(1, 1.0, R(100, 150))))  # not noticed
    with pytest.raises(SchedulerError):
        sched.validate()


# -- resplit and new_subjob --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([R(200, 240), R(250, 300)], r"leave out \[240, 250\)"),
        ([R(200, 260), R(250, 300)], r"part 1 overlaps the parts before it on \[250, 260\)"),
        ([R(200, 300), R(300, 310)], r"part 1 holds events \[300, 310\) that are not"),
        ([R(200, 300), IntervalSet()], "part 1 is empty"),
        ([R(0, 100)], "not the subjob's"),
        ([], r"leave out \[200, 300\)$"),
    ],
)
def test_resplit_refuses_parts_that_do_not_cover_the_subjob(
    parts: list[IntervalSet], message: str
) -> None:
    sched, policy = busy()
    (held,) = policy.held
    with pytest.raises(SchedulerError, match=message):
        sched.resplit(held, parts)
    # Atomic: nothing changed.
    assert sched.jobs[1].live == {held.subjob_id: held}
    assert sched.state_of(held.subjob_id) is SubjobState.QUEUED
    sched.validate()


def test_resplit_replaces_the_subjob() -> None:
    sched, policy = busy()
    (held,) = policy.held
    a, b = sched.resplit(held, [R(250, 300), Part(R(200, 250), cached_on=0, preemptible=True)])
    assert (a.data, a.cached_on, a.preemptible) == (R(250, 300), held.cached_on, False)
    assert (b.data, b.cached_on, b.preemptible) == (R(200, 250), 0, True)
    assert set(sched.jobs[1].live) == {a.subjob_id, b.subjob_id}
    assert sched.state_of(held.subjob_id) is SubjobState.DONE
    assert sched.state_of(a.subjob_id) is SubjobState.QUEUED
    sched.validate()
    with pytest.raises(SchedulerError, match="is not live"):
        sched.resplit(held, [held.data])


def test_resplit_of_a_parked_subjob_unparks_it() -> None:
    sched, policy = busy()
    (held,) = policy.held
    sched.suspend(held)
    (whole,) = sched.resplit(held, [held.data])
    assert not sched.jobs[1].suspended
    assert sched.state_of(whole.subjob_id) is SubjobState.QUEUED
    sched.validate()


def test_resplit_refuses_a_running_subjob() -> None:
    sched, _ = busy()
    running = sched.running[0].subjob
    with pytest.raises(SchedulerError, match="is running: preempt or split it instead"):
        sched.resplit(running, [running.data])


def test_new_subjob_refuses_events_a_subjob_holds() -> None:
    sched, policy = busy()
    js = sched.jobs[1]
    with pytest.raises(SchedulerError, match=r"events \[250, 260\) are held by a live subjob"):
        sched.new_subjob(js, R(250, 260))
    with pytest.raises(SchedulerError, match=r"events \[400, 410\)"):
        sched.new_subjob(js, R(400, 410))  # not the job's
    # Discarded events may be cut again, once.
    (held,) = policy.held
    sched.discard(held)
    part = sched.new_subjob(js, R(250, 300))
    with pytest.raises(SchedulerError, match="held by a live subjob"):
        sched.new_subjob(js, R(290, 300))
    sched.new_subjob(js, R(200, 250))
    assert sum(sj.data.length for sj in js.live.values()) == 100
    assert part.subjob_id in js.live
    sched.validate()


# -- states and their transitions ------------------------------------------------------------


def test_illegal_transitions_raise() -> None:
    sched, policy = busy()
    running = sched.running[0].subjob
    with pytest.raises(SchedulerError, match="running -> parked is not a legal transition"):
        sched.suspend(running)
    with pytest.raises(SchedulerError, match="is running: it is not waiting"):
        sched.discard(running)
    (held,) = policy.held
    sched.discard(held)
    with pytest.raises(SchedulerError, match="not live"):
        sched.suspend(held)
    sched.preempt(0)
    assert sched.running[0].stopping
    assert not sched.running[0].settled
    assert sched.state_of(running.subjob_id) is SubjobState.STOPPING
    with pytest.raises(SchedulerError, match="already being preempted"):
        sched.preempt(0)


def test_starting_a_running_subjob_again_raises() -> None:
    sched = scheduler("farm", 1, slots=2)
    sched.handle(JobArrived(0.0, Job(0, 0.0, R(0, 50))))
    (r,) = sched.running.values()
    with pytest.raises(SchedulerError, match="running -> running is not a legal transition"):
        sched.start(r.subjob, sched.idle_slots[0])


def test_a_subjob_goes_through_its_states() -> None:
    log: list[dict[str, object]] = []
    sched = Scheduler(Topology.uniform(1, 0), space(), build_policy("farm"), trace=log.append)
    sched.handle(JobArrived(0.0, Job(0, 0.0, R(0, 50))))
    sched.handle(JobArrived(1.0, Job(1, 1.0, R(100, 150))))
    (action,) = [a for a in sched.handle(SubjobFinished(9.0, 0, 0)) if isinstance(a, Start)]
    sched.handle(SubjobFinished(20.0, action.subjob.subjob_id, 0))
    changes = [(r["subjob"], r["from"], r["to"]) for r in log if r["kind"] == "transition"]
    assert changes == [
        (0, None, "queued"),
        (0, "queued", "running"),
        (0, "running", "done"),
        (1, None, "queued"),
        (1, "queued", "running"),
        (1, "running", "done"),
    ]


# -- tracing ----------------------------------------------------------------------------------


def test_actions_carry_the_stimulus_that_caused_them() -> None:
    sched, _ = busy()
    assert sched.stimulus_id == 2
    actions = sched.handle(JobArrived(2.0, Job(2, 2.0, R(400, 500))))
    assert sched.stimulus_id == 3
    sched.preempt(0)
    out = sched.handle(SubjobStopped(3.0, sched.running[0].subjob.subjob_id, 0, R(50, 100)))
    assert all(a.cause == 4 for a in out)
    assert not actions or all(a.cause == 3 for a in actions)
    assert Preempt(5, 0).cause == -1  # built elsewhere: no cause


def test_story_tells_why_a_job_went_where_it_went() -> None:
    stream = io.StringIO()
    sched = Scheduler(
        Topology.uniform(2, 500 * 600_000),
        space(),
        build_policy("out-of-order"),
        trace=json_lines_sink(stream),
        history=10_000,
    )
    jobs = [Job(i, 10.0 * i, R(100 * i, 100 * i + 200)) for i in range(5)]
    SimEngine(sched).run(jobs)
    told = sched.story(3)
    kinds = [(r["kind"], r.get("type") or r.get("to")) for r in told]
    assert kinds[0] == ("event", "JobArrived")
    assert ("action", "Start") in kinds
    assert ("transition", "running") in kinds
    assert told[-1]["kind"] == "action"
    assert told[-1]["type"] == "JobCompleted"
    # Each action and transition is explained by an event in the story.
    events = {r["stimulus"] for r in told if r["kind"] == "event"}
    for r in told:
        assert (r["cause"] if r["kind"] == "action" else r["stimulus"]) in events
    # The JSON lines tell the same story, and every line is JSON.
    records = read_json_lines(io.StringIO(stream.getvalue()))
    assert story(records, 3) == json.loads(json.dumps(told))
    assert len(records) == len(sched.history or ())


def test_story_needs_a_history() -> None:
    with pytest.raises(SchedulerError, match="history"):
        scheduler("farm", 1).story(0)


def test_read_json_lines_names_a_bad_line() -> None:
    with pytest.raises(ValueError, match="line 2: not JSON"):
        read_json_lines(io.StringIO('{"kind": "event"}\n{oops\n'))
    with pytest.raises(ValueError, match="line 1: not a trace record"):
        read_json_lines(io.StringIO("[1, 2]\n"))


@pytest.mark.parametrize("validate", [True, False])
def test_starts_check_the_transition_whether_or_not_anyone_listens(validate: bool) -> None:
    """Without validation or a trace a start checks the table of legal transitions on a path
    of its own (``_transition`` written out in ``_launch``): the same refusal."""
    sched = Scheduler(
        Topology.uniform(1, 0, slots=2), space(), build_policy("farm"), validate=validate
    )
    sched.handle(JobArrived(0.0, Job(0, 0.0, R(0, 50))))
    (r,) = sched.running.values()
    with pytest.raises(SchedulerError, match="running -> running is not a legal transition"):
        sched.start(r.subjob, sched.idle_slots[0])


def test_a_policy_that_overrides_the_start_hooks_is_asked() -> None:
    """The scheduler skips ``started`` and ``read_mode`` only where a policy keeps the
    defaults: one that overrides them hears of every start and chooses its reads."""

    class Noting(ProcessingFarm):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[int, int]] = []

        def started(self, sched: SchedulerView, sj: Subjob, slot: int) -> None:
            self.seen.append((sj.subjob_id, slot))

        def read_mode(self, sched: SchedulerView, sj: Subjob, slot: int) -> ReadMode:
            return ReadMode(cache_fill=True)

    policy = Noting()
    sched = Scheduler(Topology.uniform(1, 0, slots=2), space(), policy, validate=False)
    out = sched.handle(JobArrived(0.0, Job(0, 0.0, R(0, 50))))
    out += sched.handle(JobArrived(0.0, Job(1, 0.0, R(100, 150))))
    starts = [a for a in out if isinstance(a, Start)]
    assert [(a.subjob.subjob_id, a.slot) for a in starts] == policy.seen
    assert len(starts) == 2
    assert all(a.cache_fill for a in starts)
