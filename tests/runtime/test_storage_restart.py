"""Reads from an XRootD server that restarts: the runtime's bounded retries wait for it, and a
server that stays away is a clear error after them, not a read blocked for minutes (the XRootD
client's own default: five tries in windows of 120 s, docs/deployment.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from datasched.runtime.storage import StorageError, copy_file
from runtime_support import free_port

pytest.importorskip("fsspec_xrootd")


class Server:
    """Debian's xrootd serving one file on loopback, started (and stopped) on demand."""

    def __init__(self, work: Path, port: int) -> None:
        self.work, self.port = work, port
        self.proc: subprocess.Popen[bytes] | None = None
        export = work / "export"
        (export / "data").mkdir(parents=True)
        (export / "data" / "f.bin").write_bytes(os.urandom(300_000))
        admin = work / "admin"
        admin.mkdir()
        for p in (work, export, export / "data"):
            p.chmod(0o755)
        (export / "data" / "f.bin").chmod(0o644)
        admin.chmod(0o777)
        self.config = work / "xrootd.cfg"
        self.config.write_text(
            f"xrd.port {port}\nxrd.allow host localhost\nall.export /data\n"
            f"oss.localroot {export}\nall.adminpath {admin}\nall.pidpath {admin}\n"
        )

    def start(self) -> None:
        exe = shutil.which("xrootd") or "xrootd"
        cmd = [exe, "-c", str(self.config), "-l", str(self.work / "admin" / "xrootd.log")]
        if os.geteuid() == 0:
            cmd[1:1] = ["-R", "nobody"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def server() -> Iterator[Server]:
    if shutil.which("xrootd") is None:
        if os.environ.get("DATASCHED_REQUIRE_XROOTD"):
            pytest.fail("xrootd is not installed (apt-get install xrootd-server)")
        pytest.skip("xrootd is not installed (apt-get install xrootd-server)")
    work = Path(tempfile.mkdtemp(prefix="datasched-xrootd-restart-"))
    srv = Server(work, free_port())
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.timeout(90)
def test_a_read_waits_for_a_restarting_server(server: Server, tmp_path: Path) -> None:
    # Down when the read begins, up two seconds later: the retries carry the read over.
    starter = threading.Timer(2.0, server.start)
    starter.start()
    try:
        n = copy_file(f"root://localhost:{server.port}//data/f.bin", tmp_path / "f.bin")
    finally:
        starter.join()
    assert n == 300_000
    assert (tmp_path / "f.bin").read_bytes() == (server.work / "export/data/f.bin").read_bytes()


@pytest.mark.timeout(60)
def test_a_server_that_stays_away_is_an_error_after_the_retries(
    server: Server, tmp_path: Path
) -> None:
    # Before the XRootD client's waits were bounded, this read blocked for ten minutes.
    url = f"root://localhost:{server.port}//data/f.bin"
    with pytest.raises(StorageError, match="after 3 attempts") as info:
        copy_file(url, tmp_path / "f.bin", retries=2, backoff_s=0.1)
    assert info.value.url == url
    assert info.value.transient
    assert not (tmp_path / "f.bin").exists()


def test_copies_do_not_close_direct_reads_of_the_same_url(
    xrootd_server: str, tmp_path: Path
) -> None:
    """A worker whose cache disk is full reads a file where it lies while another of its
    threads copies the same file (its next packet tries the cache first): the copies must
    not close the handle the reads use. fsspec's XRootD filesystem shares one read handle
    per URL across the process and closes it whenever a file of that URL is opened, which
    failed such reads with "I/O operation on closed file" after two or three copies."""
    from datasched.runtime.events import ReadSpec, open_events

    url = f"{xrootd_server}/part-003.root"
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = 0

    def read_on() -> None:
        nonlocal reads
        while not stop.is_set():
            try:
                with open_events(url, url, "Events", ReadSpec(), 0, 1000) as opened:
                    assert len(opened.events["Muon_pt"].tolist()) == 1000
                    assert len(opened.events["Muon_eta"].tolist()) == 1000
            except BaseException as exc:
                errors.append(exc)
                return
            reads += 1

    reader = threading.Thread(target=read_on)
    reader.start()
    try:
        copies = 0
        while (copies < 60 or reads < 3) and copies < 1000 and not errors:
            dest = tmp_path / f"copy-{copies}.root"
            copy_file(url, dest)
            dest.unlink()
            copies += 1
    finally:
        stop.set()
        reader.join(60)
    assert not errors, errors[0]
    assert reads >= 3, reads  # the reads overlapped the copies
