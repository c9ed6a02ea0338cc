"""The service's request language: how long parsing, checking and splitting a request take.

    python benchmarks/requests.py [--files N] [--repeat R]

Parses the paper's Appendix A, a STAR ``<job>`` request and the same request in YAML;
checks a request whose wildcard matches N files (empty files in a temporary directory);
splits those files by host. Prints the median of R runs of each, in milliseconds, and the
one-off cost of loading the XML Schema.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from datasched.service.contracts import SplitStrategy  # noqa: E402
from datasched.service.request import (  # noqa: E402
    check_request,
    parse_request,
    split_request,
    to_yaml,
)
from datasched.service.request.xml_form import schema  # noqa: E402

JOB = """<job username="einstein" name="muons" maxFilesPerProcess="20" split="by-host">
  <command>ls $FILELIST</command>
  <stdout URL="file:out/$JOBID.out"/>
  <input URL="file:data/*.root" machine="node0"/>
  <input catalog="year=2004 system=AuAu" nFiles="40"/>
</job>"""


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000, help="files the wildcard matches")
    parser.add_argument("--repeat", type=int, default=50, help="runs of each step")
    args = parser.parse_args()
    if args.files < 1 or args.repeat < 1:
        parser.error("--files and --repeat: expected integers >= 1")

    start = time.perf_counter()
    schema()
    print(f"{'XML Schema load (once)':<36} {(time.perf_counter() - start) * 1e3:9.1f} ms")
    appendix = (ROOT / "tests" / "data" / "service" / "appendix_a.xml").read_bytes()
    job = parse_request(JOB, "application/xml")
    yaml_text = to_yaml(job)
    rows = [
        ("parse: Appendix A (XML)", lambda: parse_request(appendix, "text/xml")),
        ("parse: STAR <job> (XML)", lambda: parse_request(JOB, "application/xml")),
        ("parse: the same in YAML", lambda: parse_request(yaml_text, "application/yaml")),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "data").mkdir()
        (root / "out").mkdir()
        for i in range(args.files):
            (root / "data" / f"{i:06d}.root").touch()
        local = parse_request(
            JOB.replace('<input catalog="year=2004 system=AuAu" nFiles="40"/>', ""), "text/xml"
        )
        files, errors = check_request(local, None, roots=[root])
        assert not errors, errors
        rows.append(
            (
                f"check: wildcard of {args.files} files",
                lambda: check_request(local, None, roots=[root]),
            )
        )
        rows.append(
            (
                f"split by host: {args.files} files",
                lambda: split_request("r", local, files, SplitStrategy.BY_HOST),
            )
        )
        for name, fn in rows:
            print(f"{name:<36} {median_ms(fn, args.repeat):9.2f} ms")


if __name__ == "__main__":
    main()
