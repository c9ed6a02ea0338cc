"""Fixtures of the runtime tests: a small demo dataset, jobs on it, the reference result, and
an XRootD server on loopback serving the same files."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the runtime extra is not installed")

from datasched.runtime.demodata import write_demo_dataset
from runtime_support import N_EVENTS, N_FILES, free_port


@pytest.fixture(scope="session")
def demo_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12,000-event demo dataset in six files, written once per test session."""
    return write_demo_dataset(
        tmp_path_factory.mktemp("demo-data"), n_events=N_EVENTS, n_files=N_FILES, seed=7
    )


@pytest.fixture(scope="session")
def xrootd_server(demo_catalog: Path) -> Iterator[str]:
    """Debian's xrootd serving the demo files on loopback; yields ``root://`` base URL.

    Skipped where no server is installed, unless ``DATASCHED_REQUIRE_XROOTD`` is set (CI).
    """
    exe = shutil.which("xrootd")
    if exe is None:
        if os.environ.get("DATASCHED_REQUIRE_XROOTD"):
            pytest.fail("xrootd is not installed (apt-get install xrootd-server)")
        pytest.skip("xrootd is not installed (apt-get install xrootd-server)")
    pytest.importorskip("fsspec_xrootd")
    # Not under pytest's temporary root: it is private to this user (0700), and the server
    # runs as another user.
    work = Path(tempfile.mkdtemp(prefix="datasched-xrootd-"))
    work.chmod(0o755)
    export = work / "export"
    (export / "data").mkdir(parents=True)
    for f in demo_catalog.parent.glob("*.root"):
        shutil.copy(f, export / "data" / f.name)
    admin = work / "admin"
    admin.mkdir()
    for p in (export, export / "data", *(export / "data").iterdir()):
        p.chmod(0o755 if p.is_dir() else 0o644)
    admin.chmod(0o777)
    port = free_port()
    config = work / "xrootd.cfg"
    config.write_text(
        f"xrd.port {port}\n"
        "xrd.allow host localhost\n"  # loopback clients only
        "all.export /data\n"
        f"oss.localroot {export}\n"
        f"all.adminpath {admin}\n"
        f"all.pidpath {admin}\n"
    )
    log_path = admin / "xrootd.log"  # the server (user nobody) may write only there
    cmd = [exe, "-c", str(config), "-l", str(log_path)]
    if os.geteuid() == 0:
        cmd[1:1] = ["-R", "nobody"]  # xrootd refuses to run as root
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = log_path.read_text() if log_path.exists() else ""
                    pytest.fail(f"xrootd did not start: {log[-2000:]}")
                time.sleep(0.1)
        yield f"root://localhost:{port}//data"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)
