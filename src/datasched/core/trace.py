"""The scheduler's trace: which event caused which action and which change of a subjob's state
(docs/design.md, "Invariants and tracing"; dask/distributed's ``stimulus_id`` and ``story``).

Every event :meth:`Scheduler.handle` takes gets a *stimulus id*, one more than the last; every
action it returns carries that id as its ``cause``; every change of a subjob's state is a
:class:`Transition`. With a trace sink or a history (the scheduler's ``trace`` and
``history`` arguments), each is also written as a *record*: a dict of JSON values, one kind
among ``event``, ``transition`` and ``action``, in the order they happened. ``datasched sim
--trace-log`` and ``datasched run --trace-log`` write them as JSON lines; :func:`story` (and
``datasched trace story``) picks from them what concerns one job.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any, NamedTuple

from datasched.core.intervals import IntervalSet
from datasched.core.model import Job, Subjob

__all__ = [
    "TraceRecord",
    "TraceSink",
    "Transition",
    "action_record",
    "event_record",
    "json_lines_sink",
    "jsonable",
    "read_json_lines",
    "story",
    "transition_record",
]

TraceRecord = dict[str, Any]
"""One line of a trace: ``kind`` (event, transition, action) and its fields, JSON values."""

TraceSink = Callable[[TraceRecord], None]
"""Where the scheduler sends each record as it happens."""


class Transition(NamedTuple):
    """A subjob changed state: ``from_state`` is None when it was just created; ``slot`` is -1
    when the change holds no slot."""

    stimulus: int
    time: float
    event: str
    """The kind of the event being handled (its class name)."""
    job: int
    subjob: int
    from_state: str | None
    to_state: str
    slot: int


def jsonable(value: Any) -> Any:
    """``value`` as JSON values: event sets as lists of ``[start, stop)`` pairs, subjobs and
    jobs as the fields that identify them, named tuples and dataclasses as objects."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, IntervalSet):
        return [list(r) for r in value]
    if isinstance(value, Subjob):
        return {
            "subjob": value.subjob_id,
            "job": value.job_id,
            "data": jsonable(value.data),
            "cached_on": value.cached_on,
            "preemptible": value.preemptible,
        }
    if isinstance(value, Job):
        return {"job": value.job_id, "submit_s": value.submit_s, "data": jsonable(value.data)}
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if hasattr(value, "_asdict"):
        return {k: jsonable(v) for k, v in value._asdict().items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    return repr(value)


def _detail(value: NamedTuple, *, skip: tuple[str, ...]) -> dict[str, Any]:
    return {k: jsonable(v) for k, v in value._asdict().items() if k not in skip}


def event_record(stimulus: int, event: Any, job: int | None) -> TraceRecord:
    """The record of an event taken as ``stimulus``; ``job``: the job it concerns, if one."""
    return {
        "kind": "event",
        "stimulus": stimulus,
        "time": event.time,
        "type": type(event).__name__,
        "job": job,
        "detail": _detail(event, skip=("time",)),
    }


def action_record(action: Any, job: int | None) -> TraceRecord:
    """The record of an action; ``job``: the job it concerns, if one."""
    return {
        "kind": "action",
        "cause": action.cause,
        "type": type(action).__name__,
        "job": job,
        "detail": _detail(action, skip=("cause",)),
    }


def transition_record(t: Transition) -> TraceRecord:
    return {
        "kind": "transition",
        "stimulus": t.stimulus,
        "time": t.time,
        "event": t.event,
        "job": t.job,
        "subjob": t.subjob,
        "from": t.from_state,
        "to": t.to_state,
        "slot": t.slot,
    }


def _stimulus_of(record: Mapping[str, Any]) -> int | None:
    value = record.get("cause") if record.get("kind") == "action" else record.get("stimulus")
    return value if isinstance(value, int) else None


def story(records: Iterable[Mapping[str, Any]], job_id: int) -> list[Mapping[str, Any]]:
    """Why ``job_id`` went where it went: every record that names the job (its arrival, its
    subjobs' transitions, the actions about it) and every event that caused one of them (a
    finish on the slot it took, a node lost under it), in the order they happened."""
    kept = list(records)
    causes = {_stimulus_of(r) for r in kept if r.get("job") == job_id}
    causes.discard(None)
    return [
        r
        for r in kept
        if r.get("job") == job_id or (r.get("kind") == "event" and r.get("stimulus") in causes)
    ]


def json_lines_sink(stream: IO[str]) -> TraceSink:
    """A sink that writes each record to ``stream`` as one line of JSON."""
    dumps = json.dumps
    write = stream.write

    def sink(record: TraceRecord) -> None:
        write(dumps(record, separators=(",", ":")) + "\n")

    return sink


def read_json_lines(stream: IO[str]) -> list[TraceRecord]:
    """The records of a trace written by :func:`json_lines_sink` (blank lines skipped); a line
    that is not a JSON object raises ValueError naming its number."""
    out: list[TraceRecord] = []
    for n, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {n}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or "kind" not in record:
            raise ValueError(f"line {n}: not a trace record (an object with a 'kind')")
        out.append(record)
    return out
