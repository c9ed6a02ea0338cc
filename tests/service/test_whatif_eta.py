"""ETA errors: signed seconds, relative to the time left, kept per request until it ends."""

from __future__ import annotations

import pytest

from datasched.service.eta import (
    EtaRecord,
    eta_error,
    median_abs_relative_error,
    relative_eta_error,
)


def test_eta_error_is_signed_seconds() -> None:
    assert eta_error(130.0, 120.0) == 10.0  # predicted later than it ended
    assert eta_error(100.0, 120.0) == -20.0
    assert relative_eta_error(130.0, 120.0, predicted_at=20.0) == pytest.approx(0.1)
    assert relative_eta_error(5.0, 3.0, predicted_at=3.0) == 2.0  # nothing left: over 1 s


def test_record_keeps_each_prediction_and_its_error_once_ended() -> None:
    rec = EtaRecord("r1")
    rec.predict(0.0, 100.0)
    rec.predict(50.0, 110.0)
    assert rec.errors() == []
    assert rec.at_submission is None
    rec.finish(120.0)
    assert rec.at_submission == -20.0
    errors = rec.errors()
    assert [e["error_s"] for e in errors] == [-20.0, -10.0]
    assert errors[1]["relative_error"] == pytest.approx(-10.0 / 70.0)
    assert rec.as_dict()["predictions"] == [
        {"at": 0.0, "finish": 100.0},
        {"at": 50.0, "finish": 110.0},
    ]
    with pytest.raises(ValueError, match="ended"):
        rec.predict(130.0, 140.0)


def test_predictions_must_come_in_time_order() -> None:
    rec = EtaRecord("r1")
    rec.predict(10.0, 100.0)
    with pytest.raises(ValueError, match="time order"):
        rec.predict(5.0, 100.0)


def test_median_error_over_ended_requests() -> None:
    records = []
    for i, (predicted, actual) in enumerate([(110.0, 100.0), (50.0, 100.0), (100.0, 100.0)]):
        rec = EtaRecord(f"r{i}")
        rec.predict(0.0, predicted)
        rec.finish(actual)
        records.append(rec)
    running = EtaRecord("r9")
    running.predict(0.0, 10.0)
    assert median_abs_relative_error([*records, running]) == pytest.approx(0.1)
    assert median_abs_relative_error([running]) is None
