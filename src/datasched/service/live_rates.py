"""How fast the live cluster's nodes go, measured from the packets stored so far, in
wall-clock time: the rates, busy time, spread, pace within a job's run and start cost that
:mod:`datasched.service.live` builds its snapshot from (docs/service-whatif.md).

* **Rates**: per node, the events of its packets stored over the last :data:`WINDOW_S`
  seconds over the time it had work (:func:`busy_rate`, :func:`wall_rates`), with at least
  :data:`MIN_PACKETS` packets; else over its last :data:`HISTORY_PACKETS` packets, however
  old (:func:`last_packets`).
* **Busy time**: the time between two runs of a node's packets counts at most
  :data:`IDLE_FACTOR` times what their events take at the node's median pace: a longer gap
  is the node waiting for work, not working.
* **Spread** (:func:`rate_spread`): how much a node's rate moves from one run of packets to
  the next, for the ETAs' intervals.
* **Pace within a run and start** (:func:`started_rates`, :func:`start_costs`): what a
  job's packets take once its sandboxed child has started on a node, and what starting it
  cost.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence, Set
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from datasched.service.store.db import Store
from datasched.service.store.models import Packet

__all__ = [
    "CHUNK",
    "HISTORY_PACKETS",
    "IDLE_FACTOR",
    "MIN_PACKETS",
    "MIN_RUN",
    "SENT_RUNS",
    "SPANS_S",
    "WINDOW_S",
    "busy_rate",
    "cycle_paces",
    "last_packets",
    "rate_spread",
    "recent_jobs",
    "recent_sent",
    "sent_paces",
    "span_spreads",
    "spread_over",
    "start_costs",
    "started_rates",
    "stored_events",
    "wall_rates",
]

WINDOW_S = 60.0
"""The recent past a node's wall-clock rate is measured over (seconds)."""
MIN_PACKETS = 4
"""Packets a node must have stored in the window for a wall-clock rate."""
HISTORY_PACKETS = 16
"""A node with too few packets in the window takes its wall-clock rate from its last this
many packets, however old (a request submitted after a quiet spell)."""
CHUNK = 4
"""Consecutive packets of a node whose rate is one sample of the spread."""
MIN_RUN = 3
"""Packets of one job on a node whose span is one sample of :func:`started_rates`."""
SENT_RUNS = 8
"""A node's last runs of a file (from its packets' beginning to their storing) whose median
is its pace once a job has begun there (:func:`sent_paces`)."""
IDLE_FACTOR = 3.0
"""A gap between two stored packets of a node counts as busy up to this many times what
the later packet's events take at the node's median pace; beyond, the node was idle."""


def stored_events(
    runs: Mapping[str, Sequence[tuple[float, int, str]]],
) -> dict[str, list[tuple[float, int]]]:
    """:func:`recent_jobs`' packets without their jobs: per node, (stored at, events)."""
    return {node: [(t, n) for t, n, _ in run] for node, run in runs.items()}


def recent_jobs(store: Store, now: datetime) -> dict[str, list[tuple[float, int, str]]]:
    """Per node, its packets stored in the window: (stored at, in seconds; events; job), in
    time order."""
    since = now - timedelta(seconds=WINDOW_S)
    out: dict[str, list[tuple[float, int, str]]] = {}
    with store.reading() as s:
        for node, created, a, b, job in s.execute(
            select(Packet.node, Packet.created, Packet.start, Packet.stop, Packet.job_id)
            .where(Packet.created >= since)
            .order_by(Packet.created, Packet.id)
        ):
            out.setdefault(str(node), []).append(
                (_aware(created).timestamp(), int(b) - int(a), str(job))
            )
    return out


def last_packets(store: Store, node: str) -> list[tuple[float, int, str]]:
    """The node's last :data:`HISTORY_PACKETS` packets, however old, in time order (stored
    at, events, job): a node idle for the window keeps the wall-clock rate it last worked
    at."""
    with store.reading() as s:
        rows = s.execute(
            select(Packet.created, Packet.start, Packet.stop, Packet.job_id)
            .where(Packet.node == node)
            .order_by(Packet.created.desc(), Packet.id.desc())
            .limit(HISTORY_PACKETS)
        ).all()
    return [(_aware(c).timestamp(), int(b) - int(a), str(j)) for c, a, b, j in reversed(rows)]


def _run_rate(run: Sequence[tuple[float, int]]) -> float | None:
    """Events per wall-clock second over a run of packets in time order: the events after
    the first over the time from the first's storing to the last's."""
    span = run[-1][0] - run[0][0]
    events = sum(n for _, n in run[1:])
    return events / span if span > 0 and events > 0 else None


def busy_rate(
    run: Sequence[tuple[float, int]],
    jobs: Sequence[str] | None = None,
    submitted: Mapping[str, float] | None = None,
) -> float | None:
    """Events per second a node had work over a run of its packets (``(stored at, events)``
    in time order; ``jobs``: each packet's job, None: each its own): the time a node had
    work is cut into the runs of consecutive packets of one job, each run's time being the
    gap since the packet before it and its own span; each run's time counts at most
    :data:`IDLE_FACTOR` times what its events take at the median pace of the runs, and never
    before its job was submitted (``submitted``: job -> seconds; the node cannot have worked
    on a job that did not exist). A node that waited for the dispatcher or for work did not
    work meanwhile: its rate is what it does while it has jobs (None: no run with events).

    Runs, not packets: a job's packets on a node come back in a burst after the start of
    its sandboxed child (docs/service-whatif.md), so the gaps between packets are not a
    pace: the gap before a job's first packet is its start, work, not a wait."""
    keys = list(jobs) if jobs is not None else [str(i) for i in range(len(run))]
    since = submitted or {}
    spans: list[tuple[float, int]] = []  # per run after the first: (its time, its events)
    last_t: float | None = None
    for i, (t, n) in enumerate(run):
        if i > 0 and keys[i] == keys[i - 1]:
            time_s, events = spans[-1] if spans else (0.0, 0)
            spans[-1:] = [(time_s + t - run[i - 1][0], events + n)]
        elif last_t is not None:
            began = max(last_t, since.get(keys[i], last_t))
            spans.append((max(t - began, 0.0), n))
        else:
            spans.append((0.0, 0))  # the first run: its gap before is not known
        last_t = t
    paces = [g / n for g, n in spans if g > 0 and n > 0]
    if not paces:
        return None
    pace = statistics.median(paces)
    busy = sum(min(g, IDLE_FACTOR * pace * n) for g, n in spans if n > 0)
    events = sum(n for g, n in spans if n > 0)
    return events / busy if busy > 0 else None


def wall_rates(
    recent: Mapping[str, Sequence[tuple[float, int]]],
    slots: Mapping[str, int],
    jobs: Mapping[str, Sequence[str]] | None = None,
    submitted: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Each node's events per wall-clock second per slot over its ``recent`` packets
    (``(stored at, events)`` in time order; ``jobs``: per node, each packet's job), where
    it has at least :data:`MIN_PACKETS`: over the time it had work (:func:`busy_rate`)."""
    out: dict[str, float] = {}
    for node, run in recent.items():
        if len(run) < MIN_PACKETS:
            continue
        rate = busy_rate(run, (jobs or {}).get(node), submitted)
        if rate is not None:
            out[node] = rate / max(slots.get(node, 1), 1)
    return out


def rate_spread(recent: Mapping[str, list[tuple[float, int]]]) -> float | None:
    """The spread of the nodes' wall-clock rates: the standard deviation of the logarithm
    of each run of :data:`CHUNK` packets' rate about its node's mean (None: fewer than two
    runs measured)."""
    return _spread(
        [run[i : i + CHUNK + 1] for i in range(0, len(run) - CHUNK, CHUNK)]
        for run in recent.values()
    )


def _spread(groups: Iterable[Sequence[Sequence[tuple[float, int]]]]) -> float | None:
    """The standard deviation of the logarithm of each group's rate (:func:`_run_rate`)
    about its node's mean, over the nodes with two groups or more (``groups``: per node,
    its groups of consecutive packets); None: fewer than two deviations."""
    deviations: list[float] = []
    for node_groups in groups:
        logs = [math.log(r) for g in node_groups if (r := _run_rate(g)) is not None]
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            deviations.extend(x - mean for x in logs)
    if len(deviations) < 2:
        return None
    return math.sqrt(statistics.fmean(d * d for d in deviations))


SPANS_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
"""The spans (seconds) :func:`span_spreads` reads the rates' spread over."""


def span_spreads(recent: Mapping[str, Sequence[tuple[float, int]]]) -> dict[float, float]:
    """How much the nodes' rates move over each span of :data:`SPANS_S` (``recent``: per
    node, its packets' ``(stored at, events)`` in time order): each node's packets grouped,
    consecutively, until a group spans at least that long from its first storing to its
    last; the standard deviation of the logarithm of each group's rate (the events after its
    first over its span) about its node's mean, over every node with two groups or more.
    Spans with fewer than two groups in all are left out.

    :func:`rate_spread` reads the spread over runs of :data:`CHUNK` packets, a fraction of a
    second, where a packet's size moves a rate as much as the node's pace does; over longer
    spans the packets average out and what is left is the node's pace moving. A prediction
    of a request with ``t`` seconds left errs like the rates over about ``t`` seconds
    (docs/service-whatif.md, "Intervals drawn to the time left")."""
    out: dict[float, float] = {}
    for span in SPANS_S:
        got = _spread(_span_groups(run, span) for run in recent.values())
        if got is not None:
            out[span] = got
    return out


def _span_groups(
    run: Sequence[tuple[float, int]], span: float
) -> list[Sequence[tuple[float, int]]]:
    """A node's packets in consecutive groups each spanning at least ``span`` seconds from
    its first storing to its last, the last packet of a group the first of the next."""
    groups: list[Sequence[tuple[float, int]]] = []
    i = 0
    while i < len(run):
        j = i + 1
        while j < len(run) and run[j][0] - run[i][0] < span:
            j += 1
        if j == len(run):
            break
        groups.append(run[i : j + 1])
        i = j
    return groups


def spread_over(spreads: Mapping[float, float], seconds: float) -> float | None:
    """The rates' spread over ``seconds`` from :func:`span_spreads`' figures: interpolated
    between the spans either side on logarithmic scales; below the shortest, the shortest's;
    past the longest, the line through the two longest carried on where it falls (a burst
    of half a minute measures spans of a few seconds, and its requests have tens left),
    else the longest's (None: no span measured)."""
    spans = sorted(spreads)
    if not spans:
        return None
    if seconds <= spans[0]:
        return spreads[spans[0]]
    if seconds >= spans[-1]:
        last = spreads[spans[-1]]
        if len(spans) >= 2 and 0 < last < spreads[spans[-2]]:
            slope = math.log(last / spreads[spans[-2]]) / math.log(spans[-1] / spans[-2])
            return float(last * (seconds / spans[-1]) ** slope)
        return last
    k = bisect.bisect_left(spans, seconds)
    a, b = spans[k - 1], spans[k]
    lo, hi = spreads[a], spreads[b]
    w = math.log(seconds / a) / math.log(b / a)
    if lo <= 0 or hi <= 0:
        return lo + w * (hi - lo)
    return math.exp((1 - w) * math.log(lo) + w * math.log(hi))


def start_costs(
    runs: Mapping[str, list[tuple[float, int, str]]],
    rates: Mapping[str, float],
    paces: Mapping[str, float],
) -> dict[str, float]:
    """Each node's seconds to start a job (per slot): a run of ``n`` events (one job's
    packets on the node, the mean over ``runs``) takes ``n / rate`` at the node's rate
    (starts included, ``rates``) and ``n / pace`` within the run (:func:`started_rates`,
    ``paces``): the start is the difference (at least 0). Nodes without both are left out."""
    out: dict[str, float] = {}
    for node, packets in runs.items():
        rate, pace = rates.get(node), paces.get(node)
        if not rate or not pace:
            continue
        by_job: dict[str, int] = {}
        for _, n, job in packets:
            by_job[job] = by_job.get(job, 0) + n
        if by_job:
            n_run = statistics.fmean(by_job.values())
            out[node] = max(n_run / rate - n_run / pace, 0.0)
    return out


def started_rates(runs: Mapping[str, list[tuple[float, int, str]]]) -> dict[str, float]:
    """Each node's events per second within runs of one job's packets (``(stored at,
    events, job)`` in time order): over every job of at least :data:`MIN_RUN` packets on
    the node, the events after its first packet over the time from its first to its last.
    A job's first packet on a node pays for starting it there (a sandboxed child loading
    the processor, docs/service-whatif.md), which its later packets do not: once a job has
    begun, what is left of it goes at this pace, not at the node's rate with the starts in
    it. Nodes without such a run are left out."""
    out: dict[str, float] = {}
    for node, packets in runs.items():
        by_job: dict[str, list[tuple[float, int]]] = {}
        for t, n, job in packets:
            by_job.setdefault(job, []).append((t, n))
        events = 0
        span = 0.0
        for run in by_job.values():
            if len(run) < MIN_RUN:
                continue
            events += sum(n for _, n in run[1:])
            span += run[-1][0] - run[0][0]
        if events > 0 and span > 0:
            out[node] = events / span
    return out


def _aware(t: datetime) -> datetime:
    """SQLite gives back naive datetimes (stored as UTC)."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def recent_sent(store: Store, now: datetime) -> dict[str, list[tuple[float, float, int, str, str]]]:
    """Per node, its packets stored in the window that know when they got their slot on
    their worker (``slotted``; else, stored by a runtime that did not report it, when they
    began there; stores upgraded from before keep neither for their older packets):
    ``(began, stored, events, job, url)``, seconds, in storing order. A node with fewer than
    :data:`MIN_PACKETS` there gives its last :data:`HISTORY_PACKETS` such packets, however
    old."""
    since = now - timedelta(seconds=WINDOW_S)
    began = func.coalesce(Packet.slotted, Packet.started)
    cols = (Packet.node, began, Packet.created, Packet.start, Packet.stop)
    out: dict[str, list[tuple[float, float, int, str, str]]] = {}
    with store.reading() as s:
        rows = s.execute(
            select(*cols, Packet.job_id, Packet.url)
            .where(Packet.created >= since, began.is_not(None))
            .order_by(Packet.created, Packet.id)
        ).all()
        for node, at, created, a, b, job, url in rows:
            out.setdefault(str(node), []).append(_sent(at, created, a, b, job, url))
        for node in [n for n, run in out.items() if len(run) < MIN_PACKETS]:
            old = s.execute(
                select(*cols, Packet.job_id, Packet.url)
                .where(Packet.node == node, began.is_not(None))
                .order_by(Packet.created.desc(), Packet.id.desc())
                .limit(HISTORY_PACKETS)
            ).all()
            out[node] = [_sent(*row[1:]) for row in reversed(old)]
    return out


def _sent(
    began: datetime | str | None, created: datetime, a: int, b: int, job: str, url: str
) -> tuple[float, float, int, str, str]:
    stored = _aware(created).timestamp()
    return (
        _when(began) if began is not None else stored,
        stored,
        int(b) - int(a),
        str(job),
        str(url),
    )


def _when(t: datetime | str) -> float:
    """A stored time as POSIX seconds: SQLite gives an expression over datetime columns
    (``coalesce``) back as its text."""
    if isinstance(t, str):
        t = datetime.fromisoformat(t)
    return _aware(t).timestamp()


def _file_runs(
    packets: Sequence[tuple[float, float, int, str, str]],
) -> list[tuple[float, float, int, float, str, str]]:
    """A node's runs of one job's packets of one file: ``(first began, last stored, events,
    time, job, url)``, the time being the union of each packet's span from its beginning to its
    storing: packets of other jobs that held the slot between two of this file's are not
    the file's run."""
    runs: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    for began, stored, n, job, url in packets:
        runs.setdefault((job, url), []).append((began, max(stored, began), n))
    out = []
    for (job, url), spans in runs.items():
        spans.sort()
        time_s = 0.0
        end = -math.inf
        for a, b, _ in spans:
            time_s += max(b - max(a, end), 0.0)
            end = max(end, b)
        out.append(
            (spans[0][0], max(b for _, b, _ in spans), sum(n for *_, n in spans), time_s, job, url)
        )
    return out


def warm_runs(
    runs: Mapping[str, Sequence[tuple[float, float, int, str, str]]],
    cold: Set[tuple[str, str]],
) -> dict[str, list[tuple[float, float, int, str, str]]]:
    """The nodes' packets (:func:`recent_sent`) less those of the (job, file) runs that
    began with a cold start of their user's sandbox (``cold``,
    :attr:`~datasched.service.warm_sandboxes.WarmSandboxes.cold`): the start is charged on
    its own, so a pace read from such a run would charge it twice. Where no node is left a
    run, the packets as they are (a pace with starts in it, rather than none)."""
    warm = {
        node: kept
        for node, packets in runs.items()
        if (kept := [p for p in packets if (p[3], p[4]) not in cold])
    }
    return warm if warm else {node: list(packets) for node, packets in runs.items()}


def sent_paces(
    runs: Mapping[str, Sequence[tuple[float, float, int, str, str]]],
) -> dict[str, float]:
    """Each node's events per second a job's file takes once its packets have the slot: the
    median, over the node's last :data:`SENT_RUNS` runs of one job's packets of one file
    (:func:`recent_sent`), of a run's events over its time: the union of its packets' spans
    from getting the slot on the worker to their storing. The median and the last runs: a
    file whose packets the runtime sized small, sent over many seconds, or the runs of a
    busier minute (the machine's other work), are not what the next file takes.

    A job's packets on a node are sent together, so they come back within a fraction of a
    second of each other (docs/service-whatif.md): the span between their storings
    (:func:`started_rates`) leaves out what each took, and made a file begun look ten times
    faster than it was. Counted from when their tasks began instead, a run held its wait
    for the file and behind other jobs' packets on the node, which the simulated queue
    prices on its own: several jobs on a node made runs two to four times longer. Nodes
    without such a run are left out."""
    out: dict[str, float] = {}
    for node, packets in runs.items():
        done = sorted((b, n / t) for _, b, n, t, _, _ in _file_runs(packets) if t > 0 and n > 0)
        if done:
            out[node] = statistics.median(r for _, r in done[-SENT_RUNS:])
    return out


def cycle_paces(
    runs: Mapping[str, Sequence[tuple[float, float, int, str, str]]],
    submitted: Mapping[str, float] | None = None,
    cold: Set[tuple[str, str]] = frozenset(),
) -> dict[str, float]:
    """Each node's events per second a file takes of the node's time, from one file's run
    to the next: the median, over the node's last :data:`SENT_RUNS` runs of one job's file
    after its first (:func:`recent_sent`), of the run's events over its time
    (:func:`sent_paces`) plus the gap before it, from the storing of the node's run before
    to its first packet getting the slot. The gap counts from the job's submission at the
    earliest (``submitted``: job -> seconds; before it the node had no such job), and at
    most :data:`IDLE_FACTOR` times the run's time (a longer one is the node waiting for
    work).

    The gap is what the node spends between files: the dispatch of the next job, its
    task's round trip, its sandboxed child's start. A job not yet sent is priced at this
    pace (docs/service-whatif.md): the node's busy rate (:func:`busy_rate`) holds, besides,
    every wait since a job's submission, the daemon's own delay under a burst of
    submissions included, and priced the queue about half as fast as the nodes went. Nodes
    without two such runs are left out.

    A run that began with its user's sandbox starting (``cold``: (job, file) pairs,
    :attr:`~datasched.service.warm_sandboxes.WarmSandboxes.cold`) is no sample: the
    simulation charges each start on its own (``user_setup_s``), and a pace with starts in
    it would charge them twice. It still ends the gap before the node's next run."""
    since = submitted or {}
    out: dict[str, float] = {}
    for node, packets in runs.items():
        done = sorted(_file_runs(packets))
        cycles: list[tuple[float, float]] = []
        end = -math.inf
        for i, (began, stored, n, time_s, job, url) in enumerate(done):
            if i > 0 and time_s > 0 and n > 0 and (job, url) not in cold:
                gap = max(began - max(end, since.get(job, end)), 0.0)
                cycles.append((stored, n / (time_s + min(gap, IDLE_FACTOR * time_s))))
            end = max(end, stored)
        if cycles:
            cycles.sort()
            out[node] = statistics.median(r for _, r in cycles[-SENT_RUNS:])
    return out
