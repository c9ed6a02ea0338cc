"""Processors loaded once in the master and shipped to the workers by value: the README's
``analysis.py:MyProcessor`` form, loaded by many threads at once, run on a cluster that never
sees the file, picked up again when edited, and the user's traceback when it raises."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from datasched.core.packets import PacketSizing
from datasched.runtime.jobspec import JobSpecError, load_jobs
from datasched.runtime.processor import (
    ProcessorError,
    load_processor,
    ship,
    unship,
    user_traceback,
)
from datasched.runtime.reports import EngineConfig
from datasched.runtime.session import ClusterOptions, run_jobs
from runtime_support import N_EVENTS, reference_counts

FAST = EngineConfig(queue_s=0.2, poll_s=0.1)
PACKETS = PacketSizing(target_s=0.2, min_events=1000)

ANALYSIS = """\
import time

import hist
import numpy as np

time.sleep(0.3)  # a slow import: a second thread must not see the module half-made


def _mass_hist():
    return hist.Hist.new.Reg(60, 60, 120, name="mass").Double()


class MyProcessor:
    def __init__(self, scale=1.0, label="v1"):
        self.scale = scale
        self.label = label

    def process(self, events):
        from datasched.runtime.demodata import DimuonMass

        out = DimuonMass().process(events)
        out["label"] = {self.label}
        out["scaled"] = self.scale * len(events)
        return out

    def postprocess(self, accumulator):
        return accumulator


class Broken:
    def process(self, events):
        values = [len(events)]
        return values[3]  # IndexError: the user's line
"""


def test_threads_loading_one_file_at_once_all_get_it(tmp_path: Path) -> None:
    """The README's form failed with "'MyProcessor' not found" when a worker's two threads
    loaded the file at once: one saw the module before it had run."""
    (tmp_path / "analysis.py").write_text(ANALYSIS)
    results: list[Any] = []

    def load() -> None:
        try:
            results.append(load_processor("analysis.py:MyProcessor", tmp_path))
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(type(r).__name__ == "MyProcessor" for r in results), results
    assert len({type(r) for r in results}) == 1  # one module, executed once


def test_an_edited_file_is_a_new_processor_and_a_new_key(tmp_path: Path) -> None:
    path = tmp_path / "analysis.py"
    path.write_text("def processor(events):\n    return 1\n")
    first = ship(load_processor("analysis.py", tmp_path), "analysis.py")
    path.write_text("def processor(events):\n    return 2\n")
    second = ship(load_processor("analysis.py", tmp_path), "analysis.py")
    assert first.key != second.key
    assert unship(first).process(None) == 1
    assert unship(second).process(None) == 2


def test_processor_args_go_to_the_constructor(tmp_path: Path) -> None:
    (tmp_path / "analysis.py").write_text(ANALYSIS)
    proc = load_processor("analysis.py:MyProcessor", tmp_path, {"scale": 2.0, "label": "x"})
    assert (proc.scale, proc.label) == (2.0, "x")  # type: ignore[attr-defined]
    with pytest.raises(ProcessorError, match=r"MyProcessor\(\*\*processor_args\) raised TypeError"):
        load_processor("analysis.py:MyProcessor", tmp_path, {"colour": 1})
    (tmp_path / "f.py").write_text("def processor(events):\n    return 1\n")
    with pytest.raises(ProcessorError, match="processor_args given, but 'processor' is not a"):
        load_processor("f.py", tmp_path, {"scale": 2.0})


def test_a_shipped_processor_needs_no_file(tmp_path: Path) -> None:
    (tmp_path / "analysis.py").write_text(ANALYSIS)
    shipped = ship(load_processor("analysis.py:MyProcessor", tmp_path), "analysis.py")
    (tmp_path / "analysis.py").unlink()
    # What a worker does: unpickle the bytes (by value: the class's code is in them).
    import pickle

    proc = pickle.loads(shipped.blob)
    assert proc.label == "v1"
    assert type(proc).__module__.startswith("datasched_user_")


def test_a_worker_without_the_file_shows_the_users_file_and_line(tmp_path: Path) -> None:
    """In a fresh process, as on a worker of another machine, with the file gone: the
    traceback still names the user's file and shows their line (whatever file name the
    installed cloudpickle gives code it pickles by value)."""
    import pickle
    import subprocess
    import sys

    (tmp_path / "analysis.py").write_text(ANALYSIS)
    path = (tmp_path / "analysis.py").resolve()
    shipped = ship(load_processor("analysis.py:Broken", tmp_path), "analysis.py")
    assert [(p, t) for _, p, t in shipped.sources] == [(str(path), ANALYSIS)]
    (tmp_path / "shipped.pkl").write_bytes(pickle.dumps(shipped))
    path.unlink()
    worker = (
        "import pickle, sys\n"
        "from datasched.runtime.processor import unship, user_traceback\n"
        "proc = unship(pickle.loads(open(sys.argv[1], 'rb').read()))\n"
        "try:\n"
        "    proc.process([])\n"
        "except IndexError as exc:\n"
        "    print(user_traceback(exc))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", worker, str(tmp_path / "shipped.pkl")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f'File "{path}", line' in out, out
    assert "return values[3]" in out, out


def test_the_users_traceback_names_their_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("x = 1\n\ny = x / 0\n")
    with pytest.raises(ProcessorError) as info:
        load_processor("bad.py", tmp_path)
    assert f'File "{(tmp_path / "bad.py").resolve()}", line 3' in info.value.traceback
    assert "ZeroDivisionError: division by zero" in info.value.traceback
    assert "datasched" not in info.value.traceback.split("bad.py")[0]  # starts at their code
    (tmp_path / "analysis.py").write_text(ANALYSIS)
    proc = load_processor("analysis.py:Broken", tmp_path)
    try:
        proc.process([])
    except IndexError as exc:
        text = user_traceback(exc)
    assert "values[3]" in text
    assert "IndexError" in text


def jobs_file(tmp_path: Path, catalog: Path, jobs: list[dict[str, Any]]) -> Path:
    doc = {
        "catalog": str(catalog),
        "defaults": {"processor": "analysis.py:MyProcessor"},
        "jobs": [{"output": f"out/{j['id']}.pkl", **j} for j in jobs],
    }
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_py_processor_runs_on_a_cluster_that_never_sees_the_file(
    demo_catalog: Path, tmp_path: Path
) -> None:
    """The README's ``analysis.py:MyProcessor`` with constructor arguments, on two workers of
    two threads; the file is deleted before the run starts, so the workers can only have
    the processor by value."""
    (tmp_path / "analysis.py").write_text(ANALYSIS)
    path = jobs_file(
        tmp_path,
        demo_catalog,
        [
            {"id": "a", "dataset": "zmumu", "processor_args": {"scale": 2.0, "label": "x"}},
            {"id": "b", "dataset": "zmumu", "events": [0, 5000], "submit_s": 0.1},
        ],
    )
    specs = load_jobs(path)
    (tmp_path / "analysis.py").unlink()
    opts = ClusterOptions(workers=2, cache_bytes=50 * 10**6, cache_root=tmp_path / "caches")
    report = asyncio.run(run_jobs(specs, opts, policy="out-of-order", config=FAST, packets=PACKETS))
    by_id = {j.id: j for j in report.jobs}
    assert all(j.status == "completed" for j in report.jobs), [j.error for j in report.jobs]
    a, b = report.results["a"], report.results["b"]
    assert a["label"] == {"x"}
    assert a["scaled"] == 2.0 * N_EVENTS
    assert b["label"] == {"v1"}
    assert b["scaled"] == 5000
    assert [float(x) for x in a["mass"].values()] == reference_counts(demo_catalog, 0, N_EVENTS)
    assert by_id["b"].events_processed == 5000


def test_a_processor_error_on_a_worker_comes_back_with_the_users_traceback(
    demo_catalog: Path, tmp_path: Path
) -> None:
    (tmp_path / "analysis.py").write_text(ANALYSIS)
    path = jobs_file(
        tmp_path,
        demo_catalog,
        [
            {"id": "bad", "dataset": "zmumu", "processor": "analysis.py:Broken"},
            {"id": "good", "dataset": "zmumu", "events": [0, 4000]},
        ],
    )
    specs = load_jobs(path)
    stale = tmp_path / "out" / "bad.pkl"
    stale.parent.mkdir()
    stale.write_bytes(b"an earlier run's result")
    opts = ClusterOptions(workers=2, cache_bytes=50 * 10**6, cache_root=tmp_path / "caches")
    report = asyncio.run(
        run_jobs(specs, opts, policy="cache-splitting", config=FAST, packets=PACKETS)
    )
    by_id = {j.id: j for j in report.jobs}
    assert by_id["good"].status == "completed"
    bad = by_id["bad"]
    assert bad.status == "failed"
    assert "processor error" in bad.error
    assert "IndexError" in bad.error
    assert "analysis.py" in bad.traceback
    assert "return values[3]" in bad.traceback
    # The stale output of an earlier run is not left to be taken for this run's.
    assert not stale.exists()
    assert "stale bad.pkl" in bad.error


def test_a_broken_processor_is_refused_before_anything_runs(
    demo_catalog: Path, tmp_path: Path
) -> None:
    (tmp_path / "analysis.py").write_text(
        "import time\n\n\ndef helper():\n    return 1 / 0\n\n\nhelper()\n"
    )
    path = jobs_file(tmp_path, demo_catalog, [{"id": "a", "dataset": "zmumu"}])
    with pytest.raises(JobSpecError) as info:
        load_jobs(path)
    assert "field 'processor'" in str(info.value)
    assert "ZeroDivisionError" in str(info.value)
    assert "line 5, in helper" in info.value.traceback


def test_cli_shows_the_users_traceback_and_names_the_job(
    demo_catalog: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from datasched.cli import app

    (tmp_path / "analysis.py").write_text(ANALYSIS)
    path = jobs_file(
        tmp_path,
        demo_catalog,
        [{"id": "bad", "dataset": "zmumu", "processor": "analysis.py:Broken"}],
    )
    args = ["run", str(path), "--workers", "1", "--cache-dir", str(tmp_path / "c"), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "error: job bad: processor error:" in result.stderr
    assert "return values[3]" in result.stderr
