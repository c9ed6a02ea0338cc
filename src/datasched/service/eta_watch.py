"""Each request's ETA, refreshed as the run goes: every ``period_s`` while
requests are open, the simulator predicts the live snapshot (:mod:`datasched.service.live`)
under the daemon's policy, and each open request's predicted finish is kept in its
:class:`~datasched.service.eta.EtaRecord`. When a request ends, its record takes the real end
(when its last elementary job ended: not the request's last change, which storing its
merged result moves later), and from then on says how wrong each prediction was.

Each ETA comes with an interval: the same prediction with every rate faster and slower by
the 90th percentile of their measured spread (:func:`~datasched.service.live.rate_spread`,
taken as log-normal, at least :data:`SPREAD_FLOOR`; :data:`COLD_SPREAD` while no node has
measured a rate), its P10 and P90: three simulations a refresh. Once the queue has run
(the last minute's packets include one of a job still open), each request's interval is
then drawn to the spread of the rates over a span as long as the time it has left
(:func:`~datasched.service.live_rates.span_spreads`, with :data:`SPREAD_FLOOR` added in
quadrature; :func:`horizon_interval`): the spread over a fraction of a second, which the
simulations use, is mostly the packets' sizes, and over the seconds a request has left
they average out (docs/service-whatif.md, "Intervals drawn to the time left"). A
submission predicts at once (:meth:`EtaWatch.submitted`), so a request has an ETA from the
start.

The refreshes keep to a share of the daemon's time: a refresh is three simulations of the
whole queue, seconds for a queue of thousands of jobs, run in the daemon's process beside
the API. Once one takes :data:`CHEAP_S` or more of CPU time, the next waits until the
refreshes have taken at most ``max_share`` of the time since (:func:`next_refresh_at`),
and a submission in between is answered with the ETA known so far (None for a new
request: it gets one at the next refresh) instead of waiting for three more simulations.

Near a predicted end the refreshes come sooner than ``period_s``: the next waits
:data:`NEAR_FRACTION` of the soonest time an open request is predicted to have left (at
least :data:`NEAR_MIN_S`; :func:`next_wait`; the waits, and the period, are counted from
one refresh's beginning to the next's), so a request's ETA is refreshed while it
has its last seconds to go, not once every period whatever it has left. Such a refresh
keeps to ``max_share`` of the daemon's time even when it is cheap.

Records live in the daemon's memory: a restarted daemon predicts again from its restart.
Times are the daemon's wall clock (seconds since the epoch).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from datasched.service.contracts import JobState
from datasched.service.eta import EtaRecord, median_abs_relative_error
from datasched.service.live import live_snapshot, rate_spread
from datasched.service.live_rates import recent_jobs, span_spreads, spread_over, stored_events
from datasched.service.packet_pace import DaemonPace, packet_cpu, priced_per_packet
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Request
from datasched.service.whatif import Admission, predict

__all__ = [
    "CHEAP_S",
    "COLD_SPREAD",
    "COSTS_KEPT",
    "MAX_SHARE",
    "NEAR_FRACTION",
    "NEAR_MIN_S",
    "SPREAD_FLOOR",
    "Z90",
    "EtaWatch",
    "horizon_interval",
    "interval_factors",
    "next_refresh_at",
    "next_wait",
]

Z90 = 1.2816
"""The standard normal's 90th percentile: P10 and P90 lie this many spreads either side."""
SPREAD_FLOOR = 0.25
"""The least spread of the rates (log scale) an interval is drawn from: a spread measured
over a few runs of packets understates what moves an ETA (the queue's order, the daemon's
dispatch, other programs starting), measured in docs/service-whatif.md."""
COLD_SPREAD = 1.0
"""The spread while no node has measured a rate: the rates are the predictor's defaults,
which may be off by a factor of several."""


CHEAP_S = 0.25
"""A refresh taking less (CPU seconds of its thread) is never held back: its cost is below what a
user of the API notices, and submissions get their ETA at once."""
MAX_SHARE = 0.25
"""The share of the daemon's time the refreshes may take once they are not cheap."""


def next_refresh_at(ended: float, cost_s: float, share: float = MAX_SHARE) -> float:
    """The soonest time (the clock ``ended`` is on) the next refresh may begin, after one
    that took ``cost_s`` seconds and ended at ``ended``: at once for a cheap one
    (:data:`CHEAP_S`), else once the refreshes have taken at most ``share`` of the time."""
    if cost_s < CHEAP_S:
        return ended
    return ended + _share_gap(cost_s, share)


def _share_gap(cost_s: float, share: float) -> float:
    """The wait after a refresh of ``cost_s`` that keeps the refreshes to ``share``."""
    return cost_s * (1.0 - share) / share


COSTS_KEPT = 10_000
"""How many refreshes' costs :attr:`EtaWatch.cost_s` keeps."""
NEAR_FRACTION = 0.5
"""Near a predicted end, the next refresh comes after this share of the soonest time an
open request has left: the refreshes close in on an end as the time left halves."""
NEAR_MIN_S = 0.2
"""The least wait between refreshes near an end (seconds)."""


def next_wait(
    period_s: float,
    soonest_left_s: float | None,
    cost_s: float,
    share: float = MAX_SHARE,
    elapsed_s: float = 0.0,
) -> float:
    """Seconds until the next refresh, counted from the end of the last one, which began
    ``elapsed_s`` ago: ``period_s`` from its beginning, or sooner while an open request is
    predicted to end within it (``soonest_left_s``: the least time left of the open
    requests' latest ETAs, None if none has one) — :data:`NEAR_FRACTION` of that time, at
    least :data:`NEAR_MIN_S`; and at least what keeps a refresh that took ``cost_s`` to
    ``share`` of the time (:func:`next_refresh_at`'s rule, for cheap refreshes too), never
    more than the period. Refreshes are spaced from beginning to beginning: on a busy
    machine a refresh's own wall time, mostly waits for a core, would otherwise be added to
    every wait near an end."""
    target = period_s
    if soonest_left_s is not None:
        target = min(period_s, max(NEAR_FRACTION * soonest_left_s, NEAR_MIN_S))
    return min(period_s, max(target - elapsed_s, _share_gap(cost_s, share), 0.0))


def interval_factors(spread: float | None, measured: bool) -> tuple[float, float]:
    """The rate factors of the P90 (slow) and P10 (fast) finishes: rates slower and faster
    by the 90th percentile of a log-normal of the spread."""
    sigma = COLD_SPREAD if not measured else max(spread or 0.0, SPREAD_FLOOR)
    return math.exp(-Z90 * sigma), math.exp(Z90 * sigma)


def horizon_interval(
    left_s: float, low_s: float, high_s: float, spreads: Mapping[float, float]
) -> tuple[float, float]:
    """A request's P10 and P90 time left (``low_s``, ``high_s``, from the simulations)
    drawn to the spread of the rates over its time left ``left_s``
    (:func:`~datasched.service.live_rates.spread_over` of ``spreads``, with
    :data:`SPREAD_FLOOR` added in quadrature): the interval's width on a logarithmic scale
    becomes 2 x :data:`Z90` times that spread, each side keeping its share of it, so the
    simulations' shape (a side the queue holds shorter than the other) is kept. Unchanged
    where nothing is measured over spans, or the point or a side is not after now."""
    over = spread_over(spreads, left_s)
    if over is None or left_s <= 0 or low_s <= 0 or high_s <= low_s:
        return low_s, high_s
    k = 2 * Z90 * math.hypot(SPREAD_FLOOR, over) / math.log(high_s / low_s)
    return left_s * (low_s / left_s) ** k, left_s * (high_s / left_s) ** k


log = logging.getLogger(__name__)

_FINAL = tuple(s.value for s in JobState if s.final)


def _aware(at: datetime) -> datetime:
    """SQLite gives stored times back naive (they are UTC)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


class EtaWatch:
    """Predicts every open request's finish under ``policy`` every ``period_s`` seconds;
    ``cluster`` gives the runner's description of the cluster."""

    def __init__(
        self,
        store: Store,
        cluster: Callable[[], Mapping[str, Any]],
        *,
        policy: str = "out-of-order",
        period_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        admission: Callable[[], Admission] | None = None,
        max_share: float = MAX_SHARE,
        timer: Callable[[], float] = time.monotonic,
        cpu_timer: Callable[[], float] = time.thread_time,
    ) -> None:
        if not 0 < max_share <= 1:
            raise ValueError(f"max_share: must be in (0, 1], got {max_share!r}")
        self.store = store
        self.cluster = cluster
        self.policy = policy
        self.period_s = period_s
        self.clock = clock
        self.admission = admission
        """The daemon's queue in front of the runner (``Dispatcher.admission``), simulated
        as the dispatcher hands jobs over; None: every job in the simulated core at once."""
        self.records: dict[str, EtaRecord] = {}
        self._lock = threading.Lock()
        self._refreshing = threading.Lock()
        self.cost_s: deque[float] = deque(maxlen=COSTS_KEPT)
        """Wall-clock seconds of each refresh's simulations (the point and its interval),
        the last :data:`COSTS_KEPT`: a daemon in service refreshes for months."""
        self.max_share = max_share
        self.timer = timer
        """The clock the next refresh is held back on (seconds; monotonic)."""
        self.cpu_timer = cpu_timer
        """What a refresh's cost is measured with: the CPU time of the thread running it,
        so that a refresh slowed by the API's threads, holding the interpreter, is not
        taken for an expensive one."""
        self._next_at = -math.inf
        """When the next refresh may begin (on ``timer``): :func:`next_refresh_at` of the
        last one."""
        self.last_cpu_s = 0.0
        """The last refresh's cost on ``cpu_timer``: what the loop's wait keeps to its
        share (:meth:`_wait_s`)."""
        self.last_wall_s = 0.0
        """How long the last refresh took on ``timer``: the loop's waits count from the
        refreshes' beginnings (:func:`next_wait`)."""
        self.held_back = 0
        """Submissions answered without a refresh, the refreshes being over their share."""
        self._soonest_finish: float | None = None
        """The soonest finish (on ``clock``) of the ETAs the last refresh made for open
        requests: what :meth:`soonest_left` counts down from."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.pace: DaemonPace | None = None
        """The daemon's time a packet, to price the ETAs per packet once it is measured
        (:mod:`datasched.service.packet_pace`; ``benchmarks/service_eta.py
        --eta-per-packet`` sets it); None, the daemon's default: the ETAs priced from the
        nodes' paces (docs/service-whatif.md)."""

    def refresh(self) -> int:
        """Predict now; how many open requests got a new ETA. One refresh at a time."""
        with self._refreshing:
            return self._paced()

    def submitted(self, request_id: str) -> dict[str, Any] | None:
        """The ETA of a request just stored: a refresh unless one that began after it was
        stored has predicted it already (a burst of submissions shares refreshes), or the
        refreshes are over their share of the daemon's time (then None: the request gets
        its ETA at the next refresh)."""
        with self._refreshing:
            if self.eta(request_id) is None:
                if self.timer() < self._next_at:
                    self.held_back += 1
                else:
                    self._paced()
        return self.eta(request_id)

    def _paced(self) -> int:
        """:meth:`_refresh`, its CPU time measured: the next may begin at
        :func:`next_refresh_at`."""
        began, began_wall = self.cpu_timer(), self.timer()
        try:
            return self._refresh()
        finally:
            cost = self.cpu_timer() - began
            ended = self.timer()
            self.last_cpu_s, self.last_wall_s = cost, ended - began_wall
            self._next_at = next_refresh_at(ended, cost, self.max_share)

    def _refresh(self) -> int:
        snapshot = live_snapshot(self.store, self.cluster())
        now = self.clock()
        self._close_ended()
        if not snapshot.jobs or not snapshot.nodes:
            self._soonest_finish = None
            return 0
        measured = any(n.rates.cached_events_per_s for n in snapshot.nodes)
        recent = recent_jobs(self.store, datetime.now(UTC))
        packets = stored_events(recent)
        slow, fast = interval_factors(rate_spread(packets), measured)
        open_jobs = {j.id for j in snapshot.jobs}
        # Over spans, once the queue has run: a minute of other jobs' packets (before a
        # burst, the quiet minute) says nothing of how the queue's rates will move.
        queue_ran = any(job in open_jobs for run in recent.values() for _, _, job in run)
        spreads = span_spreads(packets) if measured and queue_ran else {}
        queue = None
        if self.admission is not None:
            try:
                queue = self.admission()
            except Exception:  # the store busy: predict without the queue this time
                log.exception("reading the dispatcher's queue failed")
        master = 0.0
        if self.pace is not None:
            pace = self.pace.sample()
            mean_cpu, per_job = packet_cpu(self.store)
            if pace is not None and mean_cpu is not None:
                snapshot = priced_per_packet(snapshot, mean_cpu, per_job)
                master = pace
        prediction = predict(snapshot, self.policy, admission=queue, master_s_per_packet=master)
        late = predict(
            snapshot, self.policy, rate_factor=slow, admission=queue, master_s_per_packet=master
        )
        early = predict(
            snapshot, self.policy, rate_factor=fast, admission=queue, master_s_per_packet=master
        )
        self.cost_s.append(prediction.simulate_s + late.simulate_s + early.simulate_s)
        n = 0
        soonest: float | None = None
        with self._lock:
            for request_id, eta in prediction.requests.items():
                if eta is None:
                    continue
                low, high = early.requests.get(request_id), late.requests.get(request_id)
                interval = None
                if low is not None and high is not None:
                    low, high = horizon_interval(eta, min(low, eta), max(high, eta), spreads)
                    interval = (now + low, now + high)
                record = self.records.setdefault(request_id, EtaRecord(request_id))
                if record.actual_finish is None:
                    # an ETA counts from the snapshot
                    record.predict(now, now + eta, interval)
                    n += 1
                    soonest = now + eta if soonest is None else min(soonest, now + eta)
        self._soonest_finish = soonest
        return n

    def _close_ended(self, only: str | None = None) -> None:
        """Records of requests that ended (in the store) take their end; ``only``: just that
        request's."""
        with self._lock:
            waiting = [
                rid
                for rid, r in self.records.items()
                if r.actual_finish is None and (only is None or rid == only)
            ]
        if not waiting:
            return
        with self.store.reading() as s:
            ended = s.execute(
                select(Request.id, Request.updated, func.max(Job.updated))
                .outerjoin(Job, Job.request_id == Request.id)
                .where(Request.id.in_(waiting), Request.state.in_(_FINAL))
                .group_by(Request.id, Request.updated)
            ).all()
        with self._lock:
            for request_id, updated, last_job in ended:
                # When its last job ended: the request's own ``updated`` moves again when
                # its merged result is stored, which may be seconds later.
                at = _aware(last_job if last_job is not None else updated)
                record = self.records[request_id]
                if record.actual_finish is None:  # a refresh and a reader may race here
                    record.finish(at.timestamp())

    def eta(self, request_id: str) -> dict[str, Any] | None:
        """A request's latest predicted finish and, once it ended, each prediction's error
        (None: never predicted). A request that ended since the last refresh is closed
        here, from the store: an ended request always has its finish and its error, never
        "seconds left"."""
        self._close_ended(request_id)
        with self._lock:
            record = self.records.get(request_id)
            if record is None or not record.predictions:
                return None
            at, finish = record.predictions[-1]
            interval = record.interval(-1)
            left = None if record.actual_finish else max(finish - self.clock(), 0.0)
            return {
                "policy": self.policy,
                "predicted_at": at,
                "predicted_finish": finish,
                "predicted_low": interval[0] if interval else None,
                "predicted_high": interval[1] if interval else None,
                "seconds_left": left,
                "actual_finish": record.actual_finish,
                "error_at_submission_s": record.at_submission,
                "predictions": len(record.predictions),
            }

    def median_error(self) -> float | None:
        """The median absolute relative error of the first ETA over the requests ended."""
        with self._lock:
            return median_abs_relative_error(list(self.records.values()))

    # -- the thread ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="eta", daemon=True)
        self._thread.start()

    def soonest_left(self) -> float | None:
        """The least time left (seconds from now on ``clock``; at least 0) of the ETAs the
        last refresh made for open requests; None if it made none. A request no refresh
        predicts any more (gone from the store) does not hold the refreshes near an end."""
        if self._soonest_finish is None:
            return None
        return max(self._soonest_finish - self.clock(), 0.0)

    def _wait_s(self) -> float:
        """Until the next refresh of the loop: :func:`next_wait` after the last refresh,
        its share kept on the refresh's CPU time, as :func:`next_refresh_at` keeps it: on a
        busy machine the wall time of the simulations is mostly waits for a core, and
        counting them spaced the refreshes near an end further apart than their share asks
        (docs/service-whatif.md, "Refreshes near an end on a busy machine")."""
        return next_wait(
            self.period_s, self.soonest_left(), self.last_cpu_s, self.max_share, self.last_wall_s
        )

    def _loop(self) -> None:
        while not self._stop.wait(self._wait_s()):
            # Past its share, a refresh waits the rest of the time it must (the period
            # counted in it).
            if self._stop.wait(max(self._next_at - self.timer(), 0.0)):
                return
            try:
                self.refresh()
            except Exception:  # a prediction that fails must not stop the daemon
                log.exception("predicting the ETAs failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
