"""How wrong each ETA was: the predictions made for a request (at its submission and at each
refresh), kept until it ends, then compared with when it really ended.

Times are on the daemon's clock (seconds). An ETA's error is signed: positive when the
request ended earlier than predicted (the prediction was pessimistic), negative when later.
Its relative error divides by the time that was left when the prediction was made, so that
an error of a minute on a prediction of a day counts less than on one of two minutes.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EtaRecord",
    "eta_error",
    "interval_coverage",
    "median_abs_relative_error",
    "relative_eta_error",
]


def eta_error(predicted_finish: float, actual_finish: float) -> float:
    """Seconds by which the prediction was late (positive: the request ended before it was
    predicted to; negative: after)."""
    return predicted_finish - actual_finish


def relative_eta_error(predicted_finish: float, actual_finish: float, predicted_at: float) -> float:
    """:func:`eta_error` over the time that was really left when the prediction was made
    (``actual_finish - predicted_at``; a request that ended at once counts as one second)."""
    left = actual_finish - predicted_at
    return eta_error(predicted_finish, actual_finish) / max(left, 1.0)


@dataclass(slots=True)
class EtaRecord:
    """A request's predictions (when made, what finish they said) and, once it ended, when
    it did."""

    request_id: str
    predictions: list[tuple[float, float]] = field(default_factory=list)
    """``(predicted_at, predicted_finish)``: the first at submission, then one a refresh."""
    actual_finish: float | None = None
    intervals: list[tuple[float, float] | None] = field(default_factory=list)
    """Each prediction's interval ``(low, high)`` of finishes on the daemon's clock (P10
    and P90 of the simulated variations of the measured rates; None: none given), in the
    order of ``predictions``."""

    def predict(
        self, at: float, finish: float, interval: tuple[float, float] | None = None
    ) -> None:
        """Keep the prediction made at ``at`` (a finish on the daemon's clock) and its
        interval, which must hold the finish."""
        if self.actual_finish is not None:
            raise ValueError(f"request {self.request_id}: ended already, no more predictions")
        if self.predictions and at < self.predictions[-1][0]:
            raise ValueError(f"request {self.request_id}: predictions must come in time order")
        if interval is not None and not interval[0] <= finish <= interval[1]:
            raise ValueError(
                f"request {self.request_id}: interval {interval} does not hold the finish {finish}"
            )
        while len(self.intervals) < len(self.predictions):
            self.intervals.append(None)
        self.predictions.append((at, finish))
        self.intervals.append(interval)

    def interval(self, i: int) -> tuple[float, float] | None:
        """The interval of prediction ``i`` (None: none was given)."""
        return self.intervals[i] if -len(self.intervals) <= i < len(self.intervals) else None

    def covered(self, i: int) -> bool | None:
        """Whether the request ended inside prediction ``i``'s interval (None: not ended,
        or no interval)."""
        got = self.interval(i)
        if self.actual_finish is None or got is None:
            return None
        return got[0] <= self.actual_finish <= got[1]

    def finish(self, at: float) -> None:
        """The request ended at ``at``."""
        self.actual_finish = at

    @property
    def at_submission(self) -> float | None:
        """The error of the first prediction (seconds), once the request ended."""
        if self.actual_finish is None or not self.predictions:
            return None
        return eta_error(self.predictions[0][1], self.actual_finish)

    def errors(self) -> list[dict[str, Any]]:
        """Each prediction with its error (empty until the request ends)."""
        end = self.actual_finish
        if end is None:
            return []
        return [
            {
                "predicted_at": at,
                "predicted_finish": fin,
                "error_s": eta_error(fin, end),
                "relative_error": relative_eta_error(fin, end, at),
                "covered": self.covered(i),
            }
            for i, (at, fin) in enumerate(self.predictions)
        ]

    def as_dict(self) -> dict[str, Any]:
        rows: list[dict[str, Any]] = []
        for i, (a, f) in enumerate(self.predictions):
            row: dict[str, Any] = {"at": a, "finish": f}
            got = self.interval(i)
            if got is not None:
                row["low"], row["high"] = got
            rows.append(row)
        return {
            "request": self.request_id,
            "actual_finish": self.actual_finish,
            "predictions": rows,
            "errors": self.errors(),
        }


def median_abs_relative_error(records: Iterable[EtaRecord]) -> float | None:
    """The median, over ended requests, of the absolute relative error of the prediction
    made at submission (None: no request has ended with a prediction)."""
    values = [
        abs(relative_eta_error(r.predictions[0][1], r.actual_finish, r.predictions[0][0]))
        for r in records
        if r.actual_finish is not None and r.predictions
    ]
    return statistics.median(values) if values else None


def interval_coverage(records: Iterable[EtaRecord], which: int | None = None) -> float | None:
    """The share of ended requests' predictions whose interval held the real finish: of
    each request's prediction ``which`` (0: the first, -1: the last), or of all of them
    (None). None when no ended request has a prediction with an interval."""
    hits: list[bool] = []
    for r in records:
        indices = range(len(r.predictions)) if which is None else [which]
        for i in indices:
            got = r.covered(i) if r.predictions else None
            if got is not None:
                hits.append(got)
    return sum(hits) / len(hits) if hits else None
