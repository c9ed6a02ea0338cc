"""ETA errors over a load test with the real runner.

The daemon on loopback (as ``datasched demo-service``) with the threaded runner on an
embedded Dask cluster of ``--workers`` workers, the demo dataset (``datasched demo``'s: 20
ROOT files of Z -> mumu events) in its catalog; ``--users`` users (in three groups) each
submit ``--requests`` requests at once, from a thread each: request ``k`` of user ``i`` runs
the dimuon-mass processor over ``--files`` consecutive files starting at a file of its own,
so that requests overlap and the caches matter. Waits until every request ends, then prints:
requests completed, submit latency p50/p99, and over the requests ended with an ETA, the
median absolute relative error (``datasched.service.eta``) of the first ETA made for each
(at its submission) and of the last one (the last refresh before it ended), with the
signed medians (predicted minus actual: positive when the requests ended sooner than
predicted), the coverage of their P10-P90 intervals, and what a prediction cost.
Also the machine's load average, before and after. Figures only; nothing is asserted.

With ``--warmup N``, N requests of the same processor (each over files of its own choosing)
run to their end before the users submit: the daemon has seen the processor before, as a
daemon in service has, and prices a new request from those packets
(docs/service-whatif.md); their ETAs are not counted. With ``--rounds R``, the users
submit their requests R times, each round once the last ended, and the figures are the
last round's: predicted from the packets of a loaded run, as a daemon in service predicts
(every round's figures are in the JSON). ``--detail`` (with ``--json``) adds, per request,
its packets, predictions and end, what each refresh predicted from and what it cost, and
the requests run before the users' (the warm-up's) with their first packet's slot
(docs/service-whatif.md reads them), and per refresh the cluster's pace it assumed against
the pace it delivered (``refresh_rates``), and this process's CPU time every 0.1 s while the
users' requests run (``process_cpu``: the daemon's, and the users' threads'), and the last
ETA's error by what the request's jobs were doing at its last refresh (``last_by_state``:
running, between files, not sent; printed as well without ``--json``).
``--eta-per-packet`` prices the ETAs per packet (:mod:`datasched.service.packet_pace`: the
nodes at the packets' CPU, the daemon as the simulator's master queue), which the daemon
does not by default. ``--repeat N`` runs the whole load test N times, a fresh daemon each,
and adds the figures of all their ended requests pooled (``pooled`` in the JSON, beside
``runs``): one run's thirty requests give a coverage that moves by 10 to 30 points from run
to run, too little to tell two rules apart. Every prediction is also counted by the time it
predicted left (``by_left``, printed as a table): its error, the spread an interval would
need there and the spread the interval had, and the share of finishes inside.

    python benchmarks/service_eta.py [--users 10] [--requests 3] [--workers 4] [--files 2]
        [--policy out-of-order] [--tertiary-mb-s MB] [--eta-period-s 2] [--warmup N]
        [--rounds R] [--eta-per-packet] [--repeat N] [--json [--detail]]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

FINAL = {"completed", "failed", "aborted", "refused"}
N_FILES = 20


def _percentile(xs: list[float], q: int) -> float:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def request_body(data_dir: Path, user: int, k: int, files: int) -> str:
    """Request ``k`` of user ``user``: the dimuon mass over ``files`` consecutive files."""
    first = (7 * user + 3 * k) % N_FILES
    paths = [data_dir / f"part-{(first + j) % N_FILES:03d}.root" for j in range(files)]
    return (
        f"title: user{user} request {k}\n"
        "processor: {name: 'datasched.runtime.demodata:DimuonMass', tree: Events}\n"
        "inputs:\n" + "".join(f"  - {p}\n" for p in paths)
    )


def eta_figures(records: list[Any]) -> dict[str, Any]:
    """The ETA errors of ended requests (``EtaRecord``s): first (at submission) and last
    prediction's, signed predicted minus actual (``datasched.service.eta.eta_error``), over
    the time that was left; and the coverage of their intervals (the share of finishes
    inside the P10-P90 interval given with the ETA): of the first, of the last, of all."""
    from datasched.service.eta import relative_eta_error

    ended = [r for r in records if r.actual_finish is not None and r.predictions]
    rows = [
        {
            "request": r.request_id,
            "predictions": len(r.predictions),
            "first_relative_error": relative_eta_error(
                r.predictions[0][1], r.actual_finish, r.predictions[0][0]
            ),
            "last_relative_error": relative_eta_error(
                r.predictions[-1][1], r.actual_finish, r.predictions[-1][0]
            ),
            # seconds the request had left when its last ETA was made
            "last_left_s": r.actual_finish - r.predictions[-1][0],
            # whether the finish fell inside the first's, the last's and each
            # prediction's interval (None: none given): what --repeat pools
            "first_inside": r.covered(0),
            "last_inside": r.covered(-1),
            "inside": [r.covered(i) for i in range(len(r.predictions))],
            # each prediction's time left, predicted and real, and its interval's ends as
            # times left (None: no interval): what by_left bands
            "lefts": [
                [
                    finish - at,
                    r.actual_finish - at,
                    *((None, None) if r.interval(i) is None else (x - at for x in r.interval(i))),
                ]
                for i, (at, finish) in enumerate(r.predictions)
            ],
        }
        for r in ended
    ]
    return {"per_request": rows, **_summary(rows)}


BANDS_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
"""The bounds of the bands of time predicted left that :func:`by_left` counts in."""


def by_left(lefts: list[list[float | None]]) -> list[dict[str, Any]]:
    """The predictions (:func:`eta_figures`' ``lefts``: time predicted left, time really
    left, the interval's ends as times left) in bands of time predicted left
    (:data:`BANDS_S`). Per band: how many; the median, P10 and P90 of the log of the time
    predicted left over the time really left (positive: predicted too late, as the ETA
    errors' sign); the spread a log-normal interval about the point would need to hold 80 %
    of them, (P90 - P10) / (2 x Z90); the median spread the intervals had, their log width
    over 2 x Z90; the share of finishes inside. A prediction of a request that ended at
    once, or predicted to, has no log error and is left out."""
    from datasched.service.eta_watch import Z90  # P10 to P90 of a log-normal: 2 x Z90 spreads

    Row = tuple[float, float, float | None, float | None]
    bands: list[list[Row]] = [[] for _ in range(len(BANDS_S) + 1)]
    for predicted, real, low, high in lefts:
        if predicted is None or real is None or predicted <= 0 or real <= 0:
            continue
        k = sum(1 for edge in BANDS_S if predicted >= edge)
        bands[k].append((predicted, real, low, high))
    out = []
    for k, band in enumerate(bands):
        if not band:
            continue
        errors = [math.log(predicted / real) for predicted, real, _, _ in band]
        widths = [
            math.log(high / low) / (2 * Z90)
            for _, _, low, high in band
            if low is not None and high is not None and low > 0
        ]
        inside = [
            low <= real <= high
            for _, real, low, high in band
            if low is not None and high is not None
        ]
        p10, p90 = _percentile(errors, 10), _percentile(errors, 90)
        out.append(
            {
                "left_s": [(0.0, *BANDS_S)[k], BANDS_S[k] if k < len(BANDS_S) else None],
                "predictions": len(band),
                "median_log_error": statistics.median(errors),
                "p10_log_error": p10,
                "p90_log_error": p90,
                "spread_needed": (p90 - p10) / (2 * Z90),
                "spread_used": _median(widths),
                "inside": _share(list(inside)),
            }
        )
    return out


def _share(hits: list[bool | None]) -> float | None:
    """The share of True among the known (not None) ``hits``; None if none is known."""
    known = [h for h in hits if h is not None]
    return sum(known) / len(known) if known else None


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians and coverages over :func:`eta_figures`'s rows, of one run or several."""
    first = [row["first_relative_error"] for row in rows]
    last = [row["last_relative_error"] for row in rows]
    return {
        "with_eta": len(rows),
        "median_abs_first": _median([abs(x) for x in first]),
        "median_abs_last": _median([abs(x) for x in last]),
        "median_first": _median(first),
        "median_last": _median(last),
        "median_last_left_s": _median([row["last_left_s"] for row in rows]),
        "coverage_first": _share([row["first_inside"] for row in rows]),
        "coverage_last": _share([row["last_inside"] for row in rows]),
        "coverage_all": _share([h for row in rows for h in row["inside"]]),
        "by_left": by_left([x for row in rows for x in row.get("lefts", [])]),
    }


def pooled(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of :func:`eta_figures` over the ended requests of several runs together
    (``--repeat``): one run's thirty requests give a coverage that moves by 10 to 30 points
    from run to run (docs/service-whatif.md), so a comparison pools several."""
    return {"runs": len(reports), **_summary([row for r in reports for row in r["per_request"]])}


def run(
    users: int,
    requests: int,
    *,
    workers: int = 4,
    files: int = 2,
    policy: str = "out-of-order",
    tertiary_mb_s: float | None = None,
    eta_period_s: float = 2.0,
    timeout_s: float = 900.0,
    warmup: int = 0,
    detail: bool = False,
    rounds: int = 1,
    per_packet: bool = False,
) -> dict[str, Any]:
    import httpx

    import datasched.service.eta_watch as eta_watch
    from datasched.runtime.demodata import write_demo_dataset
    from datasched.service.demo import serving
    from datasched.service.eta import median_abs_relative_error

    load_before = os.getloadavg()
    snapshots: list[dict[str, Any]] = []
    cpu = _CpuSampler() if detail else None
    taking = getattr(eta_watch, "live_snapshot")  # noqa: B009
    if detail:

        def watched(store: Any, cluster: Any) -> Any:
            snap = taking(store, cluster)
            snapshots.append(_snapshot_summary(time.time(), snap))
            return snap

        setattr(eta_watch, "live_snapshot", watched)  # noqa: B010 (patched for the dump)
    with tempfile.TemporaryDirectory(prefix="datasched-eta-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # as demo-service: the jobs' account (when run as root) reaches it
        data_dir = work / "data"
        write_demo_dataset(data_dir, n_files=N_FILES)
        names = {f"user{i}": f"group{i % 3}" for i in range(users)}
        with serving(
            work,
            data_dir.resolve(),
            workers=workers,
            policy=policy,
            users=names,
            tertiary_mb_s=tertiary_mb_s,
            eta_period_s=eta_period_s,
        ) as d:
            base = f"{d.url}/api/v1"
            if per_packet and d.service.eta is not None:
                from datasched.service.packet_pace import DaemonPace

                d.service.eta.pace = DaemonPace(d.service.store)
            if detail and d.service.eta is not None and d.service.eta.admission is not None:
                queue_of = d.service.eta.admission

                def admission() -> Any:
                    queue = queue_of()
                    if snapshots:  # the refresh's own snapshot, taken just before
                        snapshots[-1]["admission"] = {
                            "pending": list(queue.pending),
                            "max_held": queue.max_held,
                        }
                    return queue

                d.service.eta.admission = admission
            if warmup:
                _warm_up(base, d.tokens["user0"], data_dir.resolve(), warmup, files, timeout_s)

            def user(i: int) -> tuple[list[float], list[str], list[str]]:
                latency: list[float] = []
                ids: list[str] = []
                refused: list[str] = []
                token = d.tokens[f"user{i}"]
                with httpx.Client(
                    base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=120
                ) as c:
                    for k in range(requests):
                        body = request_body(data_dir.resolve(), i, k, files)
                        t0 = time.perf_counter()
                        r = c.post(
                            "/requests", content=body, headers={"Content-Type": "application/yaml"}
                        )
                        latency.append(time.perf_counter() - t0)
                        (ids if r.status_code == 201 else refused).append(
                            r.json().get("id", "") if r.status_code == 201 else r.text[:200]
                        )
                return latency, ids, refused

            per_round: list[dict[str, Any]] = []
            eta = d.service.eta
            for _ in range(rounds):
                started = time.monotonic()
                started_at = time.time()
                if cpu is not None:
                    cpu.start()
                with ThreadPoolExecutor(max_workers=users) as pool:
                    results = list(pool.map(user, range(users)))
                ids = {rid: f"user{i}" for i, r in enumerate(results) for rid in r[1]}
                states: dict[str, str] = {}
                with httpx.Client(base_url=base, timeout=120) as c:
                    while True:
                        for rid, who in ids.items():
                            if states.get(rid) in FINAL:
                                continue
                            got = c.get(
                                f"/requests/{rid}",
                                headers={"Authorization": f"Bearer {d.tokens[who]}"},
                            )
                            states[rid] = got.json()["state"]
                        if all(st in FINAL for st in states.values()):
                            break
                        if time.monotonic() - started > timeout_s:
                            break
                        time.sleep(0.5)
                elapsed = time.monotonic() - started
                eta.refresh()  # closes the records of the requests ended since the last refresh
                with eta._lock:
                    ended = [r for r in eta.records.values() if r.request_id in ids]
                figures = eta_figures(ended)
                del figures["per_request"]
                per_round.append({"elapsed_s": elapsed, **figures})
            if cpu is not None:
                cpu.stop()
            with eta._lock:
                records = [r for r in eta.records.values() if r.request_id in ids]
                cost = list(eta.cost_s)
                held_back = eta.held_back
            median = median_abs_relative_error(records)
            with_eta = {r.request_id for r in records if r.predictions}
            rows = _detail(d.service.store, records, started_at) if detail else []
            before = _earlier_packets(d.service.store, started_at) if detail else []
            earlier = _earlier_requests(d.service.store, started_at) if detail else []
    setattr(eta_watch, "live_snapshot", taking)  # noqa: B010
    latency = [x for r in results for x in r[0]]
    return {
        "users": users,
        "requests_each": requests,
        "workers": workers,
        "files_per_request": files,
        "policy": policy,
        "tertiary_mb_s": tertiary_mb_s,
        "eta_period_s": eta_period_s,
        "warmup": warmup,
        "eta_per_packet": per_packet,
        "accepted": len(ids),
        "refused": [x for r in results for x in r[2]],
        "completed": sum(st == "completed" for st in states.values()),
        "ended": sum(st in FINAL for st in states.values()),
        "elapsed_s": elapsed,
        "submit_p50_ms": _percentile(latency, 50) * 1e3,
        "submit_p99_ms": _percentile(latency, 99) * 1e3,
        "median_abs_relative_error": median,
        "ended_without_eta": sum(
            1 for rid, st in states.items() if st in FINAL and rid not in with_eta
        ),
        **eta_figures(records),
        **({"rounds": per_round} if rounds > 1 else {}),
        "refreshes": len(cost),
        "refresh_cost_s_median": _median(cost),
        "submissions_held_back": held_back,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        **(
            {
                "started_at": started_at,
                "detail": rows,
                "earlier_packets": before,
                "earlier_requests": earlier,
                "snapshots": snapshots,
                "refresh_rates": refresh_rates(snapshots, rows, started_at),
                "last_by_state": last_by_state(rows, snapshots, started_at),
                "process_cpu": [] if cpu is None else cpu.since(started_at),
                "refresh_costs_s": cost,
            }
            if detail
            else {}
        ),
    }


class _CpuSampler:
    """The CPU time of this process (the daemon, its runner and Dask's scheduler, and the
    users' threads, which mostly wait), every 0.1 s while the users' requests run: what the
    daemon spends a packet (docs/service-whatif.md)."""

    def __init__(self) -> None:
        import threading

        self.samples: list[tuple[float, float]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> None:
        """Start sampling (again at a later round: it goes on)."""
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while True:  # one sample at least, however soon it is stopped
            self.samples.append((time.time(), time.process_time()))
            if self._done.wait(0.1):
                return

    def since(self, t0: float) -> list[list[float]]:
        """``[seconds from t0, CPU seconds]`` pairs."""
        return [[round(t - t0, 3), round(c, 4)] for t, c in self.samples]


def refresh_rates(
    snapshots: list[dict[str, Any]], rows: list[dict[str, Any]], t0: float
) -> list[dict[str, Any]]:
    """Per refresh after ``t0`` (the users' first submission) that saw jobs: what the cluster
    was assumed to deliver against what it did (docs/service-whatif.md).

    ``t_s``: when (seconds from ``t0``); ``jobs`` and ``events_left``: what it saw;
    ``assumed_events_per_s``: the nodes' measured rates summed (None where no node had
    one); ``real_end_s``: when the last of those jobs' requests ended, of those that did
    (``rows``: ``--detail``'s requests, the users'); ``delivered_events_per_s``: the events
    left over the time until then (the cluster's real pace on that work, requests still to
    come included); ``predicted_end_s``: that request's ETA at this refresh (its prediction
    made nearest ``t_s``, within a quarter second)."""
    ended = {r["request"]: r for r in rows if r.get("actual_finish") is not None}
    out = []
    for snap in snapshots:
        t = snap["at"] - t0
        if t < 0 or not snap["jobs"]:
            continue
        requests = {j["request_id"] for j in snap["snapshot"]["jobs"]}
        mine = [ended[r] for r in requests if r in ended]
        if not mine:
            continue
        last = max(mine, key=lambda r: r["actual_finish"])
        left = sum(j["left"] for j in snap["jobs"].values())
        rates = [v for v in snap["nodes"].values() if v]
        near = [p for p in last["predictions"] if abs(p[0] - t) <= 0.25]
        predicted = min(near, key=lambda p: abs(p[0] - t))[1] if near else None
        real = last["actual_finish"] - t
        out.append(
            {
                "t_s": round(t, 3),
                "jobs": len(snap["jobs"]),
                "events_left": left,
                "assumed_events_per_s": round(sum(rates)) if rates else None,
                "delivered_events_per_s": round(left / real) if real > 0 else None,
                "predicted_end_s": None if predicted is None else round(predicted, 3),
                "real_end_s": round(last["actual_finish"], 3),
            }
        )
    return out


STATES = ("running", "between files", "not sent")
"""What a request's jobs were doing at the snapshot an ETA was predicted from: one in a slot;
none in a slot, some of their events done (waiting for a node for the next file); none begun."""


def request_state(snapshot: dict[str, Any], request_id: str) -> str | None:
    """The :data:`STATES` entry of a request in a snapshot (its JSON form); None: not in it."""
    jobs = [j for j in snapshot["jobs"] if j["request_id"] == request_id]
    if not jobs:
        return None
    if any(j.get("node") is not None for j in jobs):
        return "running"
    begun = any(
        f.get("todo") is not None and sum(b - a for a, b in f["todo"]) < f["n_events"]
        for j in jobs
        for f in j["files"]
    )
    return "between files" if begun else "not sent"


def last_by_state(
    rows: list[dict[str, Any]], snapshots: list[dict[str, Any]], t0: float
) -> dict[str, dict[str, Any]]:
    """The last ETA's error (relative to the time left, as :func:`eta_figures`) by the
    request's state (:func:`request_state`) in the snapshot it was predicted from, the last
    taken at or before the prediction (``rows``: :func:`_detail`'s, on seconds from ``t0``;
    ``snapshots``: the refreshes', on the wall clock): requests, median |relative|, signed
    median, median seconds left."""
    taken = sorted((s["at"] - t0, i) for i, s in enumerate(snapshots))
    found: dict[str, list[tuple[float, float]]] = {state: [] for state in STATES}
    for r in rows:
        if not r["predictions"] or r["actual_finish"] is None:
            continue
        at, finish = r["predictions"][-1][:2]
        before = [i for when, i in taken if when <= at + 1e-3]
        if not before:
            continue
        state = request_state(snapshots[before[-1]]["snapshot"], r["request"])
        if state is None:
            continue
        left = r["actual_finish"] - at
        found[state].append(((finish - r["actual_finish"]) / max(left, 1.0), left))
    return {
        state: {
            "requests": len(xs),
            "median_abs": _median([abs(e) for e, _ in xs]),
            "median": _median([e for e, _ in xs]),
            "median_left_s": _median([left for _, left in xs]),
        }
        for state, xs in found.items()
    }


def _snapshot_summary(at: float, snap: Any) -> dict[str, Any]:
    """What a refresh predicted from: each node's rate and each job's cost and events left."""
    return {
        "at": at,
        "snapshot": snap.as_dict(),
        "nodes": {n.name: n.rates.cached_events_per_s for n in snap.nodes},
        "jobs": {
            j.id: {
                "node": j.node,
                "cpu_s_per_event": j.cpu_s_per_event,
                "left": sum(
                    f.n_events if f.todo is None else sum(b - a for a, b in f.todo) for f in j.files
                ),
            }
            for j in snap.jobs
        },
    }


def _since(x: Any, t0: float) -> float | None:
    """Seconds from ``t0`` of a time the store gave back (naive ones are UTC; a string from an
    aggregate is ISO 8601; None stays None), to the millisecond."""
    from datetime import UTC, datetime

    if x is None:
        return None
    if isinstance(x, str):
        x = datetime.fromisoformat(x)
    return round(float((x if x.tzinfo else x.replace(tzinfo=UTC)).timestamp()) - t0, 3)


def _earlier_packets(store: Any, t0: float) -> list[list[Any]]:
    """The packets stored before the users' first submission (the warm-up's, the earlier
    rounds'): seconds from it, node, events, job, file, and when it got its slot (seconds
    from it; None: not known)."""
    from datetime import UTC, datetime

    from sqlalchemy import select

    from datasched.service.store.models import Packet

    since = datetime.fromtimestamp(t0, UTC)
    with store.reading() as s:
        rows = s.execute(
            select(
                Packet.created,
                Packet.node,
                Packet.start,
                Packet.stop,
                Packet.job_id,
                Packet.url,
                Packet.slotted,
            )
            .where(Packet.created < since)
            .order_by(Packet.created)
        ).all()

    return [
        [_since(c, t0), n, b - a, j, u.rsplit("/", 1)[-1], _since(slot, t0)]
        for c, n, a, b, j, u, slot in rows
    ]


def _earlier_requests(store: Any, t0: float) -> list[list[Any]]:
    """The requests submitted before the users' first submission (the warm-up's, the earlier
    rounds'): seconds from it of their submission, of their jobs' first packet getting its
    slot (None: not known) and of their last packet's storing: what a request alone waits
    for the daemon's dispatch (docs/service-whatif.md)."""
    from datetime import UTC, datetime

    from sqlalchemy import func, select

    from datasched.service.store.models import Job, Packet, Request

    since = datetime.fromtimestamp(t0, UTC)
    with store.reading() as s:
        rows = s.execute(
            select(
                Request.id,
                Request.created,
                func.min(func.coalesce(Packet.slotted, Packet.started)),
                func.max(Packet.created),
            )
            .join(Job, Job.request_id == Request.id)
            .outerjoin(Packet, Packet.job_id == Job.id)
            .where(Request.created < since)
            .group_by(Request.id, Request.created)
            .order_by(Request.created)
        ).all()
    return [[rid, _since(c, t0), _since(slot, t0), _since(last, t0)] for rid, c, slot, last in rows]


def _detail(store: Any, records: list[Any], t0: float) -> list[dict[str, Any]]:
    """Per request, on seconds from the users' first submission: when it was stored, its
    jobs' first and last packets and their nodes, when its last job ended, when its record
    says it ended, and each prediction (made at, finish, P10, P90)."""
    from sqlalchemy import select

    from datasched.service.store.models import Job, Packet, Request

    def ts(x: Any) -> float:
        from datetime import UTC

        return float((x if x.tzinfo else x.replace(tzinfo=UTC)).timestamp()) - t0

    out = []
    with store.reading() as s:
        for r in records:
            req = s.get(Request, r.request_id)
            jobs = list(s.scalars(select(Job).where(Job.request_id == r.request_id)))
            packets = s.execute(
                select(
                    Packet.created,
                    Packet.node,
                    Packet.start,
                    Packet.stop,
                    Packet.cpu_s,
                    Packet.started,
                    Packet.url,
                    Packet.slotted,
                )
                .join(Job, Packet.job_id == Job.id)
                .where(Job.request_id == r.request_id)
                .order_by(Packet.created)
            ).all()
            out.append(
                {
                    "request": r.request_id,
                    "created": ts(req.created) if req else None,
                    "jobs": len(jobs),
                    "jobs_ended": max((ts(j.updated) for j in jobs), default=None),
                    "actual_finish": None if r.actual_finish is None else r.actual_finish - t0,
                    "packets": [
                        [
                            round(ts(c), 3),
                            n,
                            int(b) - int(a),
                            round(float(u), 4),
                            None if began is None else round(ts(began), 3),
                            url.rsplit("/", 1)[-1],
                            None if slot is None else round(ts(slot), 3),
                        ]
                        for c, n, a, b, u, began, url, slot in packets
                    ],
                    "predictions": [
                        [at - t0, fin - t0, *(x - t0 for x in (r.interval(i) or ()))]
                        for i, (at, fin) in enumerate(r.predictions)
                    ],
                }
            )
    return out


def _warm_up(base: str, token: str, data_dir: Path, n: int, files: int, timeout_s: float) -> None:
    """``n`` requests of the processor, one after the other, each to its end."""
    import httpx

    with httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=120
    ) as c:
        for k in range(n):
            r = c.post(
                "/requests",
                content=request_body(data_dir, 1000 + k, 0, files).replace(
                    "title: user", "title: warm-up "
                ),
                headers={"Content-Type": "application/yaml"},
            )
            r.raise_for_status()
            rid = r.json()["id"]
            started = time.monotonic()
            while c.get(f"/requests/{rid}").json()["state"] not in FINAL:
                if time.monotonic() - started > timeout_s:
                    raise SystemExit(f"warm-up request {rid} did not end in {timeout_s:.0f} s")
                time.sleep(0.5)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=10)
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--files", type=int, default=2)
    p.add_argument("--policy", default="out-of-order")
    p.add_argument("--tertiary-mb-s", type=float, default=None)
    p.add_argument("--eta-period-s", type=float, default=2.0)
    p.add_argument("--warmup", type=int, default=0, help="requests run before the users'")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="the users submit their requests this many times, each round once the last "
        "ended; the figures are the last round's (predicted from a loaded run's packets), "
        "with every round's in the JSON",
    )
    p.add_argument(
        "--eta-per-packet",
        action="store_true",
        help="the ETAs priced per packet: the nodes at the packets' CPU, the daemon as the "
        "simulator's master queue at its CPU a stored packet",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the whole load test this many times, a fresh daemon each, and give the "
        "figures of every run's ended requests pooled as well as each run's",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--detail",
        action="store_true",
        help="with --json: per request its packets, predictions and end, and what each "
        "refresh predicted from (its snapshot and the daemon's queue)",
    )
    args = p.parse_args()
    for name in ("users", "requests", "workers", "files", "rounds", "repeat"):
        if getattr(args, name) < 1:
            p.error(f"--{name}: expected an integer >= 1")
    if args.files > N_FILES:
        p.error(f"--files: at most {N_FILES} (the demo dataset's files)")
    if args.eta_period_s <= 0:
        p.error("--eta-period-s: expected a number > 0")
    reports = [
        run(
            args.users,
            args.requests,
            workers=args.workers,
            files=args.files,
            policy=args.policy,
            tertiary_mb_s=args.tertiary_mb_s,
            eta_period_s=args.eta_period_s,
            warmup=args.warmup,
            detail=args.detail,
            rounds=args.rounds,
            per_packet=args.eta_per_packet,
        )
        for _ in range(args.repeat)
    ]
    if args.json:
        out = reports[0] if args.repeat == 1 else {"runs": reports, "pooled": pooled(reports)}
        print(json.dumps(out, indent=2))
    else:
        for report in reports:
            _print(report)
        if args.repeat > 1:
            got = pooled(reports)
            print(
                f"pooled over {got['runs']} runs, {got['with_eta']} ended requests with an ETA: "
                f"median |first| {_fmt(got['median_abs_first'])} (signed "
                f"{_fmt(got['median_first'])}), median |last| {_fmt(got['median_abs_last'])} "
                f"(signed {_fmt(got['median_last'])}, made "
                f"{_fmt(got['median_last_left_s'])} s before the end); inside P10-P90: first "
                f"{_fmt(got['coverage_first'])}, last {_fmt(got['coverage_last'])}, all ETAs "
                f"{_fmt(got['coverage_all'])}"
            )
            _print_by_left(got["by_left"])
    if any(r["ended"] != r["users"] * r["requests_each"] for r in reports):
        sys.exit(1)


def _print(report: dict[str, Any]) -> None:
    """One run's figures, as text."""
    n = report["users"] * report["requests_each"]
    print(
        f"{report['users']} users x {report['requests_each']} requests on "
        f"{report['workers']} workers ({report['policy']}): {report['accepted']}/{n} "
        f"accepted, {report['completed']} completed, {report['ended']} ended in "
        f"{report['elapsed_s']:.0f} s"
    )
    print(f"  submit p50 {report['submit_p50_ms']:.0f} ms  p99 {report['submit_p99_ms']:.0f} ms")
    print(
        f"  ETA relative error over {report['with_eta']} ended requests with an ETA: "
        f"median |first| {_fmt(report['median_abs_first'])} (signed "
        f"{_fmt(report['median_first'])}), median |last| "
        f"{_fmt(report['median_abs_last'])} (signed {_fmt(report['median_last'])}, made "
        f"{_fmt(report['median_last_left_s'])} s before the end)"
    )
    print(
        f"  finishes inside their P10-P90 interval: first {_fmt(report['coverage_first'])}"
        f", last {_fmt(report['coverage_last'])}, all ETAs {_fmt(report['coverage_all'])}"
        f"; {report['refreshes']} predictions, median {_fmt(report['refresh_cost_s_median'])}"
        " s each (the point and its interval)"
        f"; {report['submissions_held_back']} submissions answered without one"
    )
    for state, got in report.get("last_by_state", {}).items():
        print(
            f"  last ETA, {state} at its refresh: {got['requests']} requests, median "
            f"|relative| {_fmt(got['median_abs'])} (signed {_fmt(got['median'])}), "
            f"{_fmt(got['median_left_s'])} s left"
        )
    _print_by_left(report["by_left"])
    before = " ".join(f"{x:.1f}" for x in report["load_before"])
    after = " ".join(f"{x:.1f}" for x in report["load_after"])
    print(f"  load average before {before}, after {after}")


def _print_by_left(bands: list[dict[str, Any]]) -> None:
    """:func:`by_left`'s bands, a line each."""
    if bands:
        print("  by time predicted left: predictions, log(predicted/real) P10 median P90,")
        print("  spread needed for 80 % / the intervals' spread, inside")
    for b in bands:
        lo, hi = b["left_s"]
        span = f"{lo:g}-{hi:g} s" if hi is not None else f"{lo:g}+ s"
        print(
            f"    {span:>9} {b['predictions']:5d}  {b['p10_log_error']:+.2f} "
            f"{b['median_log_error']:+.2f} {b['p90_log_error']:+.2f}  "
            f"{b['spread_needed']:.2f} / {_fmt(b['spread_used'])}  {_fmt(b['inside'])}"
        )


if __name__ == "__main__":
    main()
