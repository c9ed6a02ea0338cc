"""Service load benchmark: many users submitting requests at once to a daemon on loopback.

Starts the API (uvicorn, one process) over a fresh store with the test suite's stand-in
request language and runner (tests/svc_support.py: each elementary job "runs" in one
packet), makes ``--users`` users, and has each submit ``--requests`` requests from a thread
of its own, all at once. Checks that every request was accepted (201) and stored, and that
every one completed; prints the latency percentiles of the submissions and of the reads,
and the submissions per second; exits 1 unless every request was accepted, stored and
completed. Figures only; nothing is asserted on time.

    python benchmarks/service_load.py [--users 20] [--requests 10] [--db URL] [--json]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def _percentiles(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else xs * 99
    return {"p50_ms": q[49] * 1e3, "p90_ms": q[89] * 1e3, "p99_ms": q[98] * 1e3,
            "max_ms": xs[-1] * 1e3}  # fmt: skip


def run(users: int, requests: int, db: str) -> dict[str, Any]:
    # Imported here so that bad options are refused at once.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import httpx
    import uvicorn

    from datasched.service.api.deps import Limits
    from datasched.service.app import build_state, create_app
    from datasched.service.catalog import Catalog
    from datasched.service.contracts import FileRef
    from datasched.service.store.db import Store
    from datasched.service.store.models import Request
    from datasched.service.users import add_user
    from svc_support import FakeLanguage, FakeRunner

    store = Store(db)
    with store.session() as s:
        tokens = [add_user(s, f"user{i}", f"group{i % 4}") for i in range(users)]
    Catalog(store).put("d", [FileRef(f"/d/{i}.root", 100, 10_000) for i in range(4)])
    state = build_state(
        store,
        FakeLanguage(),
        runner=FakeRunner(packet=1000),
        period_s=0.05,
        # Every request of a user may be pending at once: the load is what is measured.
        limits=Limits(rate_per_s=1000, burst=1000, max_pending=max(requests, 1)),
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    base = f"http://127.0.0.1:{port}/api/v1"
    body = "processor: p.py:P\nfiles_per_job: 2\ninput: [{catalog: dataset=d}]\n"

    def user(token: str) -> tuple[list[float], list[float], list[str], int]:
        submit, read, ids, refused = [], [], [], 0
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=headers, timeout=120) as c:
            for _ in range(requests):
                t0 = time.perf_counter()
                r = c.post("/requests", content=body, headers={"Content-Type": "application/yaml"})
                submit.append(time.perf_counter() - t0)
                if r.status_code == 201:
                    ids.append(r.json()["id"])
                else:
                    refused += 1
                t0 = time.perf_counter()
                c.get("/requests")
                read.append(time.perf_counter() - t0)
        return submit, read, ids, refused

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=users) as pool:
        results = list(pool.map(user, tokens))
    wall = time.perf_counter() - t0
    deadline = time.monotonic() + 120
    while True:
        with store.session() as s:
            states = [r.state for r in s.query(Request)]
        if all(st == "completed" for st in states) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    server.should_exit = True
    thread.join(timeout=30)
    store.close()
    submit = [x for r in results for x in r[0]]
    read = [x for r in results for x in r[1]]
    return {
        "users": users,
        "requests_each": requests,
        "accepted": sum(len(r[2]) for r in results),
        "refused": sum(r[3] for r in results),
        "stored": len(states),
        "completed": sum(st == "completed" for st in states),
        "wall_s": wall,
        "submissions_per_s": len(submit) / wall,
        "submit": _percentiles(submit),
        "list": _percentiles(read),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--requests", type=int, default=10)
    p.add_argument("--db", default=None, help="a database URL (default: a fresh SQLite file)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    for name in ("users", "requests"):
        if getattr(args, name) < 1:
            p.error(f"--{name}: expected an integer >= 1")
    with tempfile.TemporaryDirectory(prefix="datasched-load-") as tmp:
        report = run(args.users, args.requests, args.db or str(Path(tmp) / "store.db"))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['users']} users x {report['requests_each']} requests: "
          f"{report['accepted']} accepted, {report['refused']} refused, {report['stored']} "
          f"stored, {report['completed']} completed; {report['submissions_per_s']:.1f} "
          f"submissions/s")  # fmt: skip
    for what in ("submit", "list"):
        q = report[what]
        print(f"  {what:6s} p50 {q['p50_ms']:.1f} ms  p90 {q['p90_ms']:.1f} ms  "
              f"p99 {q['p99_ms']:.1f} ms  max {q['max_ms']:.1f} ms")  # fmt: skip
    n = report["users"] * report["requests_each"]
    if not report["accepted"] == report["stored"] == report["completed"] == n:
        sys.exit(1)


if __name__ == "__main__":
    main()
