"""What the cache's integrity checks cost (docs/runtime.md, "Faults"), on the demo's files.

The demo's dataset (200,000 events in 100 files of about 67 kB) is written once; then, with
the rounds of each measurement interleaved in one process so that the machine's load falls on
both alike:

* **fetch**: a copy into a cache (``copy_file``, flushed to disk as a cache entry is) against
  the same copy followed by the adler32 of what was written (what a fetch into the cache adds);
* **first use**: reading a cached copy whole (what the first packet's open pays at the least)
  against reading it and computing its adler32 (the check on a copy's first use in a process);
* **every use**: the ``stat`` each use makes;
* **a packet**: a demo packet over a whole file (open it, read its events, fill the dimuon
  histogram), which the first use's check is compared with;
* the adler32's throughput on a larger file (1 GiB of zeros in memory is not a file: 64 MiB
  written to the temporary directory, read from the page cache).

    python benchmarks/cache_checksum.py [--rounds 20] [--json]

Ratios are medians over the rounds; the load on the machine is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from datasched.runtime.compute import run_processor
from datasched.runtime.demodata import DimuonMass, write_demo_dataset
from datasched.runtime.diskcache import _signature, file_adler32
from datasched.runtime.events import ReadSpec, forget_open_files
from datasched.runtime.storage import copy_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="datasched-checksum-") as tmp:
        root = Path(tmp)
        catalog = write_demo_dataset(root / "data", n_events=200_000, n_files=100, seed=1)
        files = sorted(catalog.parent.glob("*.root"))
        sizes = [f.stat().st_size for f in files]
        dest = root / "cache"
        dest.mkdir()
        fetch, fetch_sum, read, read_sum, stat, packet = [], [], [], [], [], []
        proc = DimuonMass()

        def copy(checksum: bool) -> float:
            t0 = time.perf_counter()
            for f in files:
                (dest / f.name).unlink(missing_ok=True)
                copy_file(str(f), dest / f.name)
                if checksum:
                    file_adler32(dest / f.name)
            return time.perf_counter() - t0

        def reread(checksum: bool) -> float:
            t0 = time.perf_counter()
            for f in files:
                if checksum:
                    file_adler32(dest / f.name)
                else:
                    (dest / f.name).read_bytes()
            return time.perf_counter() - t0

        for i in range(args.rounds):
            first = i % 2 == 0  # which goes first alternates: neither gains from the order
            a, b = (copy(False), copy(True)) if first else (copy(True), copy(False))[::-1]
            fetch.append(a)
            fetch_sum.append(b)
            a, b = (reread(False), reread(True)) if first else (reread(True), reread(False))[::-1]
            read.append(a)
            read_sum.append(b)
            t0 = time.perf_counter()
            for f in files:
                _signature(dest / f.name)
            stat.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for f in files[:10]:
                run_processor(proc, "demo", str(f), str(f), "Events", ReadSpec(), 0, 2000)
                forget_open_files()
            packet.append((time.perf_counter() - t0) / 10)
        big = root / "big"
        big.write_bytes(os.urandom(1 << 20) * 64)
        file_adler32(big)  # into the page cache
        t0 = time.perf_counter()
        file_adler32(big)
        mb_s = 64 * 1.048576 / (time.perf_counter() - t0)
    n = len(files)
    out = {
        "files": n,
        "mean_file_bytes": round(statistics.mean(sizes)),
        "rounds": args.rounds,
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "fetch_ms_per_file": round(1e3 * statistics.median(fetch) / n, 4),
        "fetch_with_adler32_ratio": round(
            statistics.median(b / a for a, b in zip(fetch, fetch_sum, strict=True)), 3
        ),
        "read_ms_per_file": round(1e3 * statistics.median(read) / n, 4),
        "read_with_adler32_ratio": round(
            statistics.median(b / a for a, b in zip(read, read_sum, strict=True)), 3
        ),
        "first_use_check_ms_per_file": round(1e3 * statistics.median(read_sum) / n, 4),
        "packet_ms_per_file": round(1e3 * statistics.median(packet), 3),
        "first_use_check_vs_packet": round(
            statistics.median(read_sum) / n / statistics.median(packet), 4
        ),
        "stat_us_per_use": round(1e6 * statistics.median(stat) / n, 2),
        "adler32_mb_s": round(mb_s),
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for key, value in out.items():
        print(f"{key:28s} {value}")


if __name__ == "__main__":
    main()
