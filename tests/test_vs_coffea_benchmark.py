"""benchmarks/vs_coffea.py: its storage (an HTTP server of byte ranges, throttled, counting
what it sends) serves what uproot and fsspec ask for, bad options are refused, and, slow, a
quick run end to end prints the figures promised (not checked: timings live in the
benchmark, not in tests)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "vs_coffea.py"
NANO = Path(__file__).resolve().parent / "data" / "nanoAOD_2015_CMS_Open_Data_ttbar.root"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("vs_coffea", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["vs_coffea"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, dict(response.headers), response.read()


def test_the_storage_serves_ranges_and_counts_bytes(tmp_path: Path) -> None:
    bench = _module()
    data = bytes(range(256)) * 40
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.bin").write_bytes(data)
    (tmp_path.parent / "secret").write_bytes(b"x")
    with bench.storage(tmp_path, 50e6) as server:
        base = f"{server.url}/sub/f.bin"
        status, headers, body = _get(base)
        assert (status, body, headers["Accept-Ranges"]) == (200, data, "bytes")
        status, headers, body = _get(base, {"Range": "bytes=10-19"})
        assert (status, body, headers["Content-Range"]) == (206, data[10:20], "bytes 10-19/10240")
        status, _, body = _get(base, {"Range": "bytes=-5"})
        assert (status, body) == (206, data[-5:])
        status, headers, body = _get(base, {"Range": "bytes=0-1, 100-103"})
        assert status == 206
        assert headers["Content-Type"].startswith("multipart/byteranges")
        assert data[0:2] in body
        assert data[100:104] in body
        for bad in ("/sub/none.bin", "/../secret", "/sub/../../secret"):
            with pytest.raises(urllib.error.HTTPError) as info:
                _get(server.url + bad)
            assert info.value.code == 404
            info.value.close()
        assert server.take_sent() == len(data) + 10 + 5 + len(body)
        assert server.take_sent() == 0


@pytest.mark.slow
def test_uproot_reads_over_it_counted(tmp_path: Path) -> None:
    """What a reader of a ROOT file asks for, over HTTP, counted byte for byte."""
    uproot = pytest.importorskip("uproot")
    bench = _module()
    shutil.copy(NANO, tmp_path / "nano.root")
    with bench.storage(tmp_path, 50e6) as server:
        with uproot.open(f"{server.url}/nano.root") as f:
            pt = f["Events"]["Muon_pt"].array()
        assert len(pt) == 200
        sent = server.take_sent()
        assert 0 < sent < NANO.stat().st_size  # a few branches, not the whole file
        assert server.take_sent() == 0


def test_bad_options_are_refused() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--repeat", "0"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "--repeat" in done.stderr.splitlines()[-1]


@pytest.mark.slow
def test_a_quick_run_reports_every_workload() -> None:
    pytest.importorskip("coffea")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    rows = doc["workloads"]
    assert [r["name"].split(":")[0] for r in rows] == ["demo", "nanoaod"]
    keys = {"coffea_s", "datasched_cold_s", "datasched_warm_s", "coffea_mb_read"}
    for row in rows:
        assert keys | {"datasched_mb_read", "name"} <= set(row)
        assert all(row[k] > 0 for k in keys)
        assert row["datasched_mb_read"] > 0
        # Warm caches: nothing read from storage again.
        assert row["datasched_warm_mb_read"] < 0.05 * row["datasched_mb_read"]
