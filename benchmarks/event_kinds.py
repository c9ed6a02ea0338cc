"""Scheduler events per job by kind, the actions each kind produces, and the engine's heap
entries, for benchmarks/run.py's simulation (docs/performance.md, "Fewer events per job").

What it counts, to find events that could be folded into the one that causes them:

* the scheduler's events by kind (the summary's ``events_handled`` is their sum), each kind
  split by the actions its handling returned (an event that returns none did no scheduling
  work beyond its books);
* the engine's heap entries by kind, and those taken without any scheduler event (a subjob's
  end superseded by a shrink or a preemption since it was pushed);
* the simulated instants the events fall on: how many share the time of the event before
  them, and the largest bursts of events at one instant.

    python benchmarks/event_kinds.py [--policy splitting] [--nodes 1000] [--jobs 20] [--json]

The events and actions come from the scheduler's trace sink (the same records as
``datasched sim --trace``); the heap entries from a wrapper around the engine's step, in this
process only. The trace makes the run several times slower: the counts, not the time, are
the output.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from run import bench_config

from datasched.sim.engine import SimEngine
from datasched.sim.experiment import simulate
from datasched.sim.state import Kind


def count(policy: str, nodes: int, jobs: int) -> dict[str, Any]:
    """The counts of one run of ``bench_config(policy, nodes, jobs)``."""
    events: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    patterns: Counter[tuple[str, str]] = Counter()
    instants: Counter[float] = Counter()
    same_instant: Counter[str] = Counter()
    current: dict[str, Any] = {"type": None, "time": None, "actions": Counter()}

    def close_event() -> None:
        kind = current["type"]
        if kind is not None:
            done = current["actions"]
            pattern = ", ".join(f"{n} {a}" for a, n in sorted(done.items())) or "none"
            patterns[(kind, pattern)] += 1

    def sink(record: Mapping[str, Any]) -> None:
        if record["kind"] == "event":
            close_event()
            kind = record["type"]
            if record["time"] == current["time"]:
                same_instant[f"{current['type']} then {kind}"] += 1
            events[kind] += 1
            instants[record["time"]] += 1
            current.update(type=kind, time=record["time"], actions=Counter())
        elif record["kind"] == "action":
            actions[record["type"]] += 1
            current["actions"][record["type"]] += 1

    heap: Counter[str] = Counter()
    idle: Counter[str] = Counter()
    step = SimEngine._step

    def counted_step(engine: SimEngine) -> bool:
        kind = Kind(engine._heap[0][2]).name.lower()
        before = engine.handled
        over = step(engine)
        heap[kind] += 1
        if engine.handled == before:
            idle[kind] += 1
        return over

    SimEngine._step = counted_step  # type: ignore[method-assign, assignment]
    try:
        summary, _ = simulate(bench_config(policy, nodes, jobs), validate=False, trace=sink)
    finally:
        SimEngine._step = step  # type: ignore[method-assign]
    close_event()
    bursts = sorted(instants.values(), reverse=True)
    total = sum(events.values())
    return {
        "policy": policy,
        "nodes": nodes,
        "jobs": jobs,
        "events_handled": summary.events_handled,
        "events": dict(events.most_common()),
        "actions": dict(actions.most_common()),
        "patterns": [
            {"event": e, "actions": p, "count": n} for (e, p), n in patterns.most_common()
        ],
        "heap_entries": dict(heap.most_common()),
        "heap_entries_without_event": dict(idle.most_common()),
        "instants": len(instants),
        "events_at_the_instant_before": dict(same_instant.most_common()),
        "largest_bursts": bursts[:10],
        "events_in_bursts_of_100": sum(b for b in bursts if b >= 100),
        "total_events": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="splitting")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    out = count(args.policy, args.nodes, args.jobs)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    jobs = out["jobs"]
    print(f"{out['policy']}, {out['nodes']} nodes, {jobs} jobs: {out['total_events']} events")
    print(f"  ({out['total_events'] / jobs:.1f} a job; summary: {out['events_handled']})")
    print("scheduler events by kind (a job):")
    for kind, n in out["events"].items():
        print(f"  {kind:24} {n:9}  {n / jobs:9.1f}")
    print("actions by kind (a job):")
    for kind, n in out["actions"].items():
        print(f"  {kind:24} {n:9}  {n / jobs:9.1f}")
    print("events by the actions they returned:")
    for p in out["patterns"][:15]:
        print(f"  {p['count']:9}  {p['event']:24} -> {p['actions']}")
    print("heap entries by kind (taken without a scheduler event):")
    for kind, n in out["heap_entries"].items():
        print(f"  {kind:24} {n:9}  ({out['heap_entries_without_event'].get(kind, 0)})")
    print(
        f"instants: {out['instants']}; events in bursts of 100 or more at one instant: "
        f"{out['events_in_bursts_of_100']}; largest bursts: {out['largest_bursts']}"
    )
    print("events at the same instant as the one before:")
    for pair, n in out["events_at_the_instant_before"].items():
        print(f"  {n:9}  {pair}")


if __name__ == "__main__":
    main()
