"""datasched against coffea's own Runner, on the same four workers and the same storage.

A coffea user runs ``coffea.processor.Runner`` with its ``DaskExecutor``. This benchmark runs
the same analyses that way and with ``datasched run`` (out-of-order; cold caches, then the
same jobs again with the caches warm), both reading the same tertiary storage: an HTTP
server started here, serving the files with byte ranges, all its readers together limited
to the demo's bandwidth (0.25 MB/s a worker, 1 MB/s for four), counting the bytes it sends.

Workloads:

* ``demo``: the demo's sixteen overlapping analyses (``datasched demo``'s jobs: each the
  dimuon mass of 30 of the 100 files, windows overlapping), submitted together; coffea runs
  them as sixteen Runners at once on one Dask client (its BaseSchema: the same flat branches
  datasched's demo reads), datasched as one jobs file.
* ``nanoaod``: one analysis (docs/examples/coffea/analysis.py, coffea's NanoAODSchema) over
  copies of the public CMS NanoAOD test file: a single pass over data read once.

For each: the makespans (coffea's from its first Runner's start to its last one's end, the
cluster already up; datasched's as its run reports it), the bytes the server sent to each,
and their ratios; the median of ``--repeat`` runs (3). ``--quick`` makes a smaller demo
dataset and one run. ``--json`` prints ``{"workloads": [{"name", "coffea_s",
"datasched_cold_s", "datasched_warm_s", "coffea_mb_read", "datasched_mb_read"}]}``.

    python benchmarks/vs_coffea.py [--repeat 3] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.server
import importlib.util
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The runtime's and coffea's modules are imported where used: a bad option is refused
# without them.

ROOT = Path(__file__).resolve().parent.parent
NANO_FILE = ROOT / "tests" / "data" / "nanoAOD_2015_CMS_Open_Data_ttbar.root"
EXAMPLE = ROOT / "docs" / "examples" / "coffea" / "analysis.py"
WORKERS = 4
THREADS = 2
"""datasched's workers run two threads (a packet's file fetched while another computes);
coffea's get the same."""
NODE_BYTES_PER_S = 0.25e6
"""The demo's tertiary bandwidth per worker (``datasched demo``)."""
CHUNKSIZE = 100_000
"""coffea's default chunksize, and datasched's ``--chunksize`` here."""
NANO_COPIES = 40
QUICK_EVENTS, QUICK_FILES = 40_000, 20


# --- the storage ---------------------------------------------------------------------------


class Storage(http.server.ThreadingHTTPServer):
    """An HTTP server of the files of ``root`` on loopback: ``GET`` with one or many byte
    ranges (what uproot and fsspec send), ``HEAD``; every byte it sends passes one token
    bucket of ``bytes_per_s`` shared by all its readers, and is counted in ``sent``."""

    daemon_threads = True

    def __init__(self, root: Path, bytes_per_s: float) -> None:
        from datasched.runtime.storage import Throttle

        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root.resolve()
        self.throttle = Throttle(bytes_per_s)
        self.sent = 0
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def send(self, wfile: Any, data: bytes) -> None:
        for i in range(0, len(data), 1 << 14):
            piece = data[i : i + (1 << 14)]
            self.throttle.consume(len(piece))
            wfile.write(piece)
            with self._lock:
                self.sent += len(piece)

    def take_sent(self) -> int:
        """The bytes sent since the last call."""
        with self._lock:
            n, self.sent = self.sent, 0
        return n


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Storage
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _file(self) -> Path | None:
        path = (self.server.root / self.path.lstrip("/").split("?")[0]).resolve()
        if self.server.root not in path.parents or not path.is_file():
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return path

    def do_HEAD(self) -> None:
        path = self._file()
        if path is not None:
            self.send_response(200)
            self.send_header("Content-Length", str(path.stat().st_size))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()

    def do_GET(self) -> None:
        path = self._file()
        if path is None:
            return
        data = path.read_bytes()
        ranges = _ranges(self.headers.get("Range"), len(data))
        if not ranges:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            self.server.send(self.wfile, data)
            return
        if len(ranges) == 1:
            a, b = ranges[0]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {a}-{b - 1}/{len(data)}")
            self.send_header("Content-Length", str(b - a))
            self.end_headers()
            self.server.send(self.wfile, data[a:b])
            return
        boundary = "datasched-bench"
        parts = [
            (
                f"--{boundary}\r\nContent-Type: application/octet-stream\r\n"
                f"Content-Range: bytes {a}-{b - 1}/{len(data)}\r\n\r\n"
            ).encode()
            + data[a:b]
            + b"\r\n"
            for a, b in ranges
        ]
        body = b"".join(parts) + f"--{boundary}--\r\n".encode()
        self.send_response(206)
        self.send_header("Content-Type", f"multipart/byteranges; boundary={boundary}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.server.send(self.wfile, body)


def _ranges(header: str | None, size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each range of a ``Range: bytes=...`` header; [] for none."""
    if not header or not header.startswith("bytes="):
        return []
    out = []
    for part in header[len("bytes=") :].split(","):
        m = re.fullmatch(r"\s*(\d*)-(\d*)\s*", part)
        if m is None:
            continue
        first, last = m.groups()
        if first:
            a, b = int(first), (int(last) + 1 if last else size)
        else:  # the last N bytes
            a, b = max(size - int(last), 0), size
        out.append((a, min(b, size)))
    return out


@contextlib.contextmanager
def storage(root: Path, bytes_per_s: float) -> Iterator[Storage]:
    server = Storage(root, bytes_per_s)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# --- the workloads -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    """Jobs for ``datasched run`` (a jobs file) and the same analyses for coffea's Runner:
    one ``(fileset, processor, schema name)`` per analysis."""

    name: str
    jobs_file: Path
    coffea: list[tuple[dict[str, Any], Any, str]]


def _coffea_processors() -> tuple[Any, Any]:
    """The demo's analysis as a coffea ``ProcessorABC``, and the docs' example's class."""
    import cloudpickle
    from coffea import processor

    from datasched.runtime.demodata import DimuonMass

    class DemoDimuon(processor.ProcessorABC):  # type: ignore[misc]  # coffea is not annotated
        def process(self, events: Any) -> Any:
            return DimuonMass().process(events)

        def postprocess(self, accumulator: Any) -> Any:
            return accumulator

    spec = importlib.util.spec_from_file_location("datasched_bench_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[spec.name] = module
    cloudpickle.register_pickle_by_value(module)  # the workers have no copy of the file
    return DemoDimuon, module.MyProcessor


def demo_workload_over(
    work: Path, base_url: str, n_events: int, n_files: int, n_jobs: int
) -> Workload:
    """The demo's jobs over a demo dataset of ``n_files`` files served at ``base_url``."""
    from datasched.compare.demo import demo_workload
    from datasched.runtime.demodata import write_demo_dataset

    data = work / "storage" / "demo"
    write_demo_dataset(data, n_events=n_events, n_files=n_files)
    doc = yaml.safe_load((data / "catalog.yaml").read_text())
    for f in doc["datasets"]["zmumu"]["files"]:
        f["url"] = f"{base_url}/demo/{f['url']}"
    catalog = work / "demo-catalog.yaml"
    catalog.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = work / "demo-jobs"
    out.mkdir()
    jobs_file = demo_workload(catalog, out, n_jobs=n_jobs)
    jobs = yaml.safe_load(jobs_file.read_text())["jobs"]
    files = doc["datasets"]["zmumu"]["files"]
    offsets = [0]
    for f in files:
        offsets.append(offsets[-1] + int(f["n_events"]))
    demo_proc, _ = _coffea_processors()
    coffea = []
    for job in jobs:
        a, b = job["events"]
        urls = [f["url"] for f, lo in zip(files, offsets, strict=False) if a <= lo < b]
        fileset = {"zmumu": {"files": dict.fromkeys(urls, "Events")}}
        coffea.append((fileset, demo_proc(), "base"))
    return Workload("demo: 16 overlapping analyses", jobs_file, coffea)


def nano_workload(work: Path, base_url: str, copies: int) -> Workload:
    """One NanoAOD analysis over ``copies`` copies of the CMS test file (distinct files)."""
    data = work / "storage" / "nano"
    data.mkdir(parents=True)
    urls = []
    for i in range(copies):
        shutil.copy(NANO_FILE, data / f"ttbar-{i:03d}.root")
        urls.append(f"{base_url}/nano/ttbar-{i:03d}.root")
    fileset = {"ttbar": {"files": dict.fromkeys(urls, "Events"), "metadata": {"xsec": 831.8}}}
    jobs_file = work / "nano-jobs.yaml"
    jobs_file.write_text(
        yaml.safe_dump(
            {
                "jobs": [
                    {
                        "id": "ttbar",
                        "fileset": fileset,
                        "processor": f"{EXAMPLE}:MyProcessor",
                        "schema": "nanoaod",
                        "output": str(work / "nano-out.coffea"),
                    }
                ]
            }
        )
    )
    _, my_processor = _coffea_processors()
    name = f"nanoaod: one pass over {copies} copies of the CMS test file"
    return Workload(name, jobs_file, [(fileset, my_processor(min_pt=5.0), "nanoaod")])


# --- the runs --------------------------------------------------------------------------------


def run_coffea(client: Any, workload: Workload) -> float:
    """coffea's Runners of ``workload``, all at once on ``client``; the seconds from the
    first's start to the last's end."""
    from coffea import processor
    from coffea.nanoevents import BaseSchema, NanoAODSchema

    schemas = {"base": BaseSchema, "nanoaod": NanoAODSchema}

    def one(item: tuple[dict[str, Any], Any, str]) -> Any:
        fileset, proc, schema = item
        runner = processor.Runner(
            executor=processor.DaskExecutor(client=client, status=False),
            schema=schemas[schema],
            chunksize=CHUNKSIZE,
        )
        return runner(fileset, processor_instance=proc)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(workload.coffea)) as pool:
        results = list(pool.map(one, workload.coffea))
    elapsed = time.perf_counter() - t0
    assert all(r is not None for r in results)
    return elapsed


def run_datasched(workload: Workload, cache_dir: Path) -> float:
    """``datasched run`` of the workload's jobs file (out-of-order, four workers, the cache
    under ``cache_dir``); its makespan."""
    cmd = [
        sys.executable,
        "-m",
        "datasched",
        "run",
        str(workload.jobs_file),
        "--workers",
        str(WORKERS),
        "--policy",
        "out-of-order",
        "--chunksize",
        str(CHUNKSIZE),
        "--cache-dir",
        str(cache_dir),
        "--no-calibrate",
        "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"datasched run failed: {done.stderr.strip()[-2000:]}")
    doc = json.loads(done.stdout)
    bad = [j["id"] for j in doc["jobs"] if j["status"] != "completed"]
    if bad:
        raise RuntimeError(f"datasched run: jobs not completed: {bad}")
    return float(doc["makespan_s"])


def _log(line: str) -> None:
    """Progress on standard error (a run lasts minutes; ``--json`` keeps standard output)."""
    print(line, file=sys.stderr, flush=True)


def one_round(
    workloads: list[Workload], server: Storage, client: Any, work: Path
) -> list[dict[str, Any]]:
    rows = []
    for k, w in enumerate(workloads):
        server.take_sent()
        coffea_s = run_coffea(client, w)
        coffea_b = server.take_sent()
        _log(f"{w.name}: coffea {coffea_s:.1f} s, {coffea_b / 1e6:.1f} MB")
        cache = work / f"cache-{k}-{time.monotonic_ns()}"
        cold_s = run_datasched(w, cache)
        cold_b = server.take_sent()
        _log(f"{w.name}: datasched cold {cold_s:.1f} s, {cold_b / 1e6:.1f} MB")
        warm_s = run_datasched(w, cache)
        warm_b = server.take_sent()
        _log(f"{w.name}: datasched warm {warm_s:.1f} s, {warm_b / 1e6:.1f} MB")
        shutil.rmtree(cache, ignore_errors=True)
        rows.append(
            {
                "name": w.name,
                "coffea_s": coffea_s,
                "datasched_cold_s": cold_s,
                "datasched_warm_s": warm_s,
                "coffea_mb_read": coffea_b / 1e6,
                "datasched_mb_read": cold_b / 1e6,
                "datasched_warm_mb_read": warm_b / 1e6,
            }
        )
    return rows


def median_rows(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each workload's figures, the median over the rounds, with the ratios."""
    out = []
    for i, first in enumerate(rounds[0]):
        row: dict[str, Any] = {"name": first["name"]}
        for key in first:
            if key != "name":
                row[key] = round(statistics.median(r[i][key] for r in rounds), 3)
        row["cold_speedup"] = round(row["coffea_s"] / row["datasched_cold_s"], 2)
        row["warm_speedup"] = round(row["coffea_s"] / row["datasched_warm_s"], 2)
        row["bytes_ratio"] = round(row["coffea_mb_read"] / max(row["datasched_mb_read"], 1e-9), 2)
        row["runs"] = len(rounds)
        out.append(row)
    return out


def run(repeat: int, quick: bool, work: Path) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from datasched.compare.demo import DEMO_EVENTS, DEMO_FILES, DEMO_JOBS

    n_events, n_files = (QUICK_EVENTS, QUICK_FILES) if quick else (DEMO_EVENTS, DEMO_FILES)
    copies = NANO_COPIES // 4 if quick else NANO_COPIES
    (work / "storage").mkdir()
    with storage(work / "storage", WORKERS * NODE_BYTES_PER_S) as server:
        workloads = [
            demo_workload_over(work, server.url, n_events, n_files, DEMO_JOBS),
            nano_workload(work, server.url, copies),
        ]
        with (
            LocalCluster(
                n_workers=WORKERS,
                threads_per_worker=THREADS,
                processes=True,
                dashboard_address=None,
                memory_limit="2GiB",
            ) as cluster,
            Client(cluster) as client,  # type: ignore[no-untyped-call]  # distributed is not annotated
        ):
            rounds = [one_round(workloads, server, client, work) for _ in range(repeat)]
    return {
        "workloads": median_rows(rounds),
        "setup": {
            "workers": WORKERS,
            "threads_per_worker": THREADS,
            "storage_mb_s": WORKERS * NODE_BYTES_PER_S / 1e6,
            "demo_events": n_events,
            "demo_files": n_files,
            "nano_copies": copies,
            "repeat": repeat,
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=None, help="Runs (median); default 3.")
    parser.add_argument("--quick", action="store_true", help="A smaller demo dataset, one run.")
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = parser.parse_args(argv)
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    if repeat < 1:
        parser.error(f"--repeat: must be at least 1, got {repeat}")
    with tempfile.TemporaryDirectory(prefix="datasched-vs-coffea-") as tmp:
        result = run(repeat, args.quick, Path(tmp))
    if args.json:
        print(json.dumps(result))
        return
    head = f"{'coffea':>8} {'ds cold':>8} {'ds warm':>8} {'MB coffea':>10} {'MB ds':>7}"
    print(f"{'workload':52} {head}")
    for r in result["workloads"]:
        print(
            f"{r['name'][:52]:52} {r['coffea_s']:7.1f}s {r['datasched_cold_s']:7.1f}s "
            f"{r['datasched_warm_s']:7.1f}s {r['coffea_mb_read']:10.1f} "
            f"{r['datasched_mb_read']:7.1f}"
        )
        print(
            f"{'':52} cold {r['cold_speedup']}x, warm {r['warm_speedup']}x faster than coffea; "
            f"coffea read {r['bytes_ratio']}x the bytes"
        )
    print(f"(median of {repeat} run(s); storage {result['setup']['storage_mb_s']} MB/s in all)")


if __name__ == "__main__":
    main()
