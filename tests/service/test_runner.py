"""The runner on a real Dask cluster: elementary jobs packet by packet, cancelled, resumed
after a stop, and STAR-style commands on the workers.

One LocalCluster (two worker processes) serves the module; each test starts a runner that
joins it by address. The data is a small demo dataset; every result is compared with the
histogram computed directly.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

pytest.importorskip("distributed", reason="the runtime extra is not installed")

from datasched.core.intervals import IntervalSet
from datasched.core.packets import PacketSizing
from datasched.runtime.dataset import load_catalog
from datasched.runtime.demodata import write_demo_dataset
from datasched.runtime.outputs import merge
from datasched.runtime.reports import EngineConfig
from datasched.runtime.session import ClusterOptions
from datasched.service.contracts import (
    CommandWork,
    ElementaryJob,
    FileRef,
    JobState,
    PacketDone,
    ProcessorWork,
)
from datasched.service.runner import Runner
from runtime_support import reference_counts
from sandbox_support import confinement

N_EVENTS = 6000
POLICY = "cache-splitting"
FAST = EngineConfig(queue_s=0.2, poll_s=0.1)
PACKETS = PacketSizing(target_s=0.2, min_events=100, chunksize=500)
SLOW = """
import time
from datasched.runtime.demodata import DimuonMass

class Slow(DimuonMass):
    def process(self, events):
        time.sleep(0.15)
        return super().process(events)
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[FileRef]]:
    catalog = write_demo_dataset(
        tmp_path_factory.mktemp("runner-data"), n_events=N_EVENTS, n_files=4, seed=3
    )
    ds = load_catalog(catalog)["zmumu"]
    files = [FileRef(f.url, f.n_events, f.n_bytes, tree=f.tree) for f in ds.files]
    return catalog, files


@pytest.fixture(scope="module")
def scheduler_address() -> Iterator[str]:
    import logging

    from distributed import LocalCluster

    with LocalCluster(  # type: ignore[no-untyped-call]  # distributed is not annotated
        n_workers=2,
        threads_per_worker=2,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    ) as cluster:
        yield cluster.scheduler_address


class Recorder:
    """A RunnerListener keeping every call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.on_packet: Callable[[PacketDone], None] | None = None

    def job_state(
        self,
        job_id: str,
        state: JobState,
        *,
        node: str | None = None,
        log: str = "",
        failed_file: str | None = None,
    ) -> None:
        self.calls.append(("state", (job_id, state, node, log, failed_file)))

    def packet_done(self, packet: PacketDone) -> None:
        self.calls.append(("packet", packet))
        if self.on_packet is not None:
            self.on_packet(packet)

    def states(self, job_id: str) -> list[JobState]:
        return [c[1][1] for c in self.calls if c[0] == "state" and c[1][0] == job_id]

    def packets(self, job_id: str) -> list[PacketDone]:
        return [c[1] for c in self.calls if c[0] == "packet" and c[1].job_id == job_id]

    def final(self, job_id: str) -> tuple[Any, ...] | None:
        for kind, args in self.calls:
            if kind == "state" and args[0] == job_id and args[1].final:
                return tuple(args)
        return None

    async def wait_final(self, job_id: str, timeout: float = 60.0) -> tuple[Any, ...]:
        for _ in range(int(timeout / 0.05)):
            got = self.final(job_id)
            if got is not None:
                return got
            await asyncio.sleep(0.05)
        raise AssertionError(f"job {job_id} did not end: {self.states(job_id)}")


def make_runner(listener: Recorder, address: str, tmp_path: Path, **kw: Any) -> Runner:
    (tmp_path / "slow.py").write_text(SLOW)
    return Runner(
        listener,
        policy=POLICY,
        cluster=ClusterOptions(
            workers=2,
            cache_bytes=50 * 10**6,
            cache_root=tmp_path / "caches",
            scheduler_address=address,
        ),
        roots=[tmp_path],
        confine=kw.pop("confine", None) or confinement(),
        config=FAST,
        packets=PACKETS,
        **kw,
    )


def processor_job(files: list[FileRef], index: int = 0, slow: bool = False) -> ElementaryJob:
    ref = "slow.py:Slow" if slow else "datasched.runtime.demodata:DimuonMass"
    return ElementaryJob("r1", index, tuple(files), ProcessorWork(ref))


def covered(packets: list[PacketDone], files: list[FileRef]) -> None:
    """Every entry of every file reported exactly once."""
    for f in files:
        mine = [(p.start, p.stop) for p in packets if p.url == f.url]
        union = IntervalSet(mine)
        assert union.length == sum(b - a for a, b in mine), f"{f.url}: an entry twice"
        assert union == IntervalSet.range(0, f.n_events), f"{f.url}: entries missing"


async def compute_failed(address: str) -> list[str]:
    """Dask's "Compute Failed" records (a task that raised, logged with its traceback) on
    the workers so far, read once no task runs there any more (a task cancelled while it
    ran goes on in its thread: what it logs at its end is counted too)."""
    from distributed import Client

    async with Client(address, asynchronous=True) as client:  # type: ignore[no-untyped-call]
        for _ in range(600):
            running = await client.run(lambda dask_worker: len(dask_worker.state.all_running_tasks))
            if not any(running.values()):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"tasks still run on the workers: {running}")
        logs = await client.get_worker_logs()
    return sorted(m for entries in logs.values() for _, m in entries if "Compute Failed" in m)


def merged_counts(packets: list[PacketDone]) -> list[float]:
    acc: Any = None
    for p in packets:
        assert p.result is not None
        acc = merge(acc, cloudpickle.loads(p.result))
    return [float(x) for x in acc["mass"].values()]


def test_processor_job_reports_every_event_once(
    data: tuple[Path, list[FileRef]], scheduler_address: str, tmp_path: Path
) -> None:
    catalog, files = data
    rec = Recorder()

    seen_out: set[tuple[str, str]] = set()
    seen_since: list[tuple[float, float]] = []  # (when the slot got the job, when read)

    async def main() -> dict[str, Any]:
        runner = make_runner(rec, scheduler_address, tmp_path)
        await runner.start()

        async def watch() -> None:  # what the slots say is out, while the job runs
            while True:
                for n in runner.cluster()["nodes"]:
                    for slot in n["slots"]:
                        seen_out.update((slot["job"], u) for u in slot["files_in_flight"])
                        if slot["job"] is not None:
                            seen_since.append((slot["since"], time.time()))
                        else:
                            assert slot["since"] is None
                await asyncio.sleep(0.005)

        watching = asyncio.create_task(watch())
        try:
            runner.submit(processor_job(files))
            await rec.wait_final("r1.0")
            return runner.cluster()
        finally:
            watching.cancel()
            await runner.stop()

    began = time.time()
    cluster = asyncio.run(main())
    # While packets were out, their slot named the job and the files they read.
    assert seen_out
    assert {j for j, _ in seen_out} == {"r1.0"}
    assert {u for _, u in seen_out} <= {f.url for f in files}
    # ... and since when the job had the slot, on the wall clock, before it was read.
    assert seen_since
    assert all(began <= since <= read for since, read in seen_since)
    assert rec.states("r1.0") == [JobState.QUEUED, JobState.RUNNING, JobState.COMPLETED]
    packets = rec.packets("r1.0")
    assert len(packets) >= len(files)
    covered(packets, files)
    assert merged_counts(packets) == reference_counts(catalog, 0, N_EVENTS)
    assert all(p.node in {n["name"] for n in cluster["nodes"]} for p in packets)
    # Each packet says when it began on its worker and when it got its slot there, after.
    for p in packets:
        assert p.started_at is not None
        assert p.slot_at is not None
        assert p.started_at <= p.slot_at + 1e-3
    assert [len(n["slots"]) for n in cluster["nodes"]] == [1, 1]
    assert sum(n["cached_bytes"] for n in cluster["nodes"]) > 0
    assert cluster["nodes"][0]["cache_capacity_bytes"] == 50 * 10**6
    assert json.loads(json.dumps(cluster)) == cluster


def test_a_jobs_code_is_its_users_so_sandboxes_are_not_shared_across_users(
    data: tuple[Path, list[FileRef]], tmp_path: Path
) -> None:
    # The same processor and arguments for two users: their code's keys differ, so the
    # workers' pools of sandboxed children never hand one user's child to the other
    # (tests/test_sandbox.py shows what such a child would leak).
    _, files = data
    runner = make_runner(Recorder(), "tcp://127.0.0.1:1", tmp_path)
    work = ProcessorWork("slow.py:Slow")
    bob = ElementaryJob("r1", 0, tuple(files), work, user="bob")
    eve = ElementaryJob("r2", 0, tuple(files), work, user="eve")
    mine = runner._processor_job(bob, work).code
    theirs = runner._processor_job(eve, work).code
    assert mine is not None
    assert theirs is not None
    assert (mine.owner, theirs.owner) == ("bob", "eve")
    assert mine.source == theirs.source
    assert mine.key != theirs.key
    again = runner._processor_job(replace(bob, index=1), work).code
    assert again is not None
    assert again.key == mine.key  # one user's jobs share their children


def test_cancel_mid_job_reports_nothing_after_abort(
    data: tuple[Path, list[FileRef]], scheduler_address: str, tmp_path: Path
) -> None:
    _, files = data
    rec = Recorder()

    logged: list[list[str]] = []

    async def main() -> None:
        logged.append(await compute_failed(scheduler_address))
        runner = make_runner(rec, scheduler_address, tmp_path)
        await runner.start()
        try:
            first = asyncio.Event()
            rec.on_packet = lambda p: first.set()
            runner.submit(processor_job(files, slow=True))
            await asyncio.wait_for(first.wait(), 30)
            assert runner.cancel("r1.0")
            await rec.wait_final("r1.0")
            await asyncio.sleep(0.5)  # a late packet would be reported by now
            logged.append(await compute_failed(scheduler_address))
        finally:
            await runner.stop()

    asyncio.run(main())
    assert rec.states("r1.0") == [JobState.QUEUED, JobState.RUNNING, JobState.ABORTED]
    # Its packets on the workers were cancelled, not failed: Dask logged no "Compute
    # Failed" traceback for them.
    before, after = logged
    assert after == before, sorted(set(after) - set(before))
    kinds = [k for k, args in rec.calls if k == "packet" or args[1] == JobState.ABORTED]
    assert kinds[-1] == "state", "a packet was reported after the abort"
    done = sum(p.stop - p.start for p in rec.packets("r1.0"))
    assert 0 < done < N_EVENTS


def test_a_cancelled_command_is_killed_and_frees_its_slot(
    data: tuple[Path, list[FileRef]], scheduler_address: str, tmp_path: Path
) -> None:
    """A command job cancelled mid-run: its process is killed on its worker (it went on to
    its own end, holding its slot, while the job showed aborted), and the next job runs."""
    import psutil

    _, files = data
    rec = Recorder()
    marker = "317"  # sleep 317: this test's command, found by its arguments

    def sleeping() -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter(["cmdline"]):
            if (p.info["cmdline"] or [])[-2:] == ["sleep", marker]:
                found.append(p)
        return found

    logged: list[list[str]] = []

    async def main() -> None:
        logged.append(await compute_failed(scheduler_address))
        runner = make_runner(rec, scheduler_address, tmp_path)
        await runner.start()
        try:
            runner.submit(ElementaryJob("c", 0, (files[0],), CommandWork(f"sleep {marker}")))
            for _ in range(600):
                if sleeping():
                    break
                await asyncio.sleep(0.05)
            assert sleeping(), rec.states("c.0")
            assert runner.cancel("c.0")
            await rec.wait_final("c.0")
            for _ in range(600):
                if not sleeping():
                    break
                await asyncio.sleep(0.05)
            assert not sleeping(), "the cancelled command still runs"
            after = ElementaryJob("d", 0, (files[0],), CommandWork("true"))
            runner.submit(after)
            await rec.wait_final(after.id)
            logged.append(await compute_failed(scheduler_address))
        finally:
            await runner.stop()

    asyncio.run(main())
    assert rec.states("c.0")[-1] == JobState.ABORTED
    assert rec.states("d.0")[-1] == JobState.COMPLETED, rec.final("d.0")
    before, after = logged
    assert after == before, sorted(set(after) - set(before))  # a command killed: no failure


def test_resume_after_a_stop_runs_each_event_once(
    data: tuple[Path, list[FileRef]], scheduler_address: str, tmp_path: Path
) -> None:
    catalog, files = data
    first, second = Recorder(), Recorder()
    job = processor_job(files, slow=True)

    async def main() -> None:
        runner = make_runner(first, scheduler_address, tmp_path)
        await runner.start()
        some = asyncio.Event()
        first.on_packet = lambda p: some.set() if len(first.packets(job.id)) >= 3 else None
        runner.submit(job)
        await asyncio.wait_for(some.wait(), 30)
        await runner.stop()  # the daemon dies: packets in flight are lost
        assert first.final(job.id) is None
        done: dict[str, list[tuple[int, int]]] = {}
        for p in first.packets(job.id):
            done.setdefault(p.url, []).append((p.start, p.stop))
        runner = make_runner(second, scheduler_address, tmp_path)
        await runner.start()
        try:
            runner.submit(job, done)
            await second.wait_final(job.id)
        finally:
            await runner.stop()

    asyncio.run(main())
    assert second.states(job.id)[-1] == JobState.COMPLETED
    before, after = first.packets(job.id), second.packets(job.id)
    assert before
    assert after
    covered(before + after, files)
    assert merged_counts(before + after) == reference_counts(catalog, 0, N_EVENTS)


WC = """
import os, sys
paths = open(os.environ["FILELIST"]).read().split()
assert paths == [os.environ[f"INPUTFILE{i}"] for i in range(int(os.environ["INPUTFILECOUNT"]))]
for p in paths:
    print(os.path.getsize(p), p)
print("stdin", sys.stdin.read().split() == paths)
print("done", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def test_commands_get_local_copies_and_failures_their_log_and_file(
    data: tuple[Path, list[FileRef]], scheduler_address: str, tmp_path: Path
) -> None:
    _, files = data
    script = tmp_path / "wc.py"
    script.write_text(WC)
    rec = Recorder()
    ok = ElementaryJob(
        "c1",
        0,
        tuple(files[:2]),
        CommandWork(f"{sys.executable} {script} 0", stdin="filelist", stdout="logs/c1.out"),
    )
    bad = ElementaryJob("c1", 1, tuple(files[2:]), CommandWork(f"{sys.executable} {script} 3"))
    # Resumed with its first file reported done: it runs again whole (one unit), and only
    # the second file is reported.
    part = ElementaryJob("c1", 2, tuple(files[:2]), CommandWork(f"{sys.executable} {script} 0"))
    missing = FileRef(str(tmp_path / "missing.root"), 100, 1000, tree="Events")
    unreadable = processor_job([files[0], missing], index=9)

    logged: list[list[str]] = []

    async def main() -> None:
        logged.append(await compute_failed(scheduler_address))
        runner = make_runner(rec, scheduler_address, tmp_path)
        await runner.start()
        try:
            runner.submit(ok)
            runner.submit(bad)
            runner.submit(part, {files[0].url: [(0, files[0].n_events)]})
            runner.submit(unreadable)
            for job in (ok, bad, part, unreadable):
                await rec.wait_final(job.id)
            logged.append(await compute_failed(scheduler_address))
        finally:
            await runner.stop()

    asyncio.run(main())
    # Real failures are still Dask's to log, with their tracebacks (a cancel is not).
    before, after = logged
    new = sorted(set(after) - set(before))
    assert any("exited with code 3" in m for m in new), new
    assert any(missing.url in m for m in new), new
    assert rec.states(ok.id) == [JobState.QUEUED, JobState.RUNNING, JobState.COMPLETED], rec.final(
        ok.id
    )
    out = (tmp_path / "logs" / "c1.out").read_text().splitlines()
    listed = [line.split(" ", 1) for line in out[:-1]]
    assert [int(size) for size, _ in listed] == [f.n_bytes for f in files[:2]]
    names = [Path(f.url).name for f in files[:2]]
    assert [path for _, path in listed] == [f"/inputs/{i:04d}-{n}" for i, n in enumerate(names)]
    assert out[-1] == "stdin True"
    assert [(p.url, p.start, p.stop, p.result) for p in rec.packets(ok.id)] == [
        (f.url, 0, f.n_events, None) for f in files[:2]
    ]
    final = rec.final(bad.id)
    assert final is not None
    assert final[1] == JobState.FAILED
    assert "exited with code 3" in final[3]
    assert "done" in final[3]
    assert rec.packets(bad.id) == []
    assert [p.url for p in rec.packets(part.id)] == [files[1].url]
    assert rec.states(part.id)[-1] == JobState.COMPLETED
    final = rec.final(unreadable.id)
    assert final is not None
    assert final[1] == JobState.FAILED
    assert final[4] == missing.url
    assert "data error" in final[3]


def test_jobs_that_cannot_run_fail_at_once_naming_the_field(
    data: tuple[Path, list[FileRef]], scheduler_address: str, tmp_path: Path
) -> None:
    _, files = data
    rec = Recorder()
    f = files[0]
    demo = ProcessorWork("datasched.runtime.demodata:DimuonMass")
    jobs: list[tuple[ElementaryJob, dict[str, list[tuple[int, int]]]]] = [
        (ElementaryJob("b", 0, (f,), ProcessorWork("nowhere.py:P")), {}),
        (ElementaryJob("b", 1, (f,), demo), {f.url: [(0, f.n_events + 1)]}),
        (ElementaryJob("b", 2, (f,), demo), {"elsewhere.root": [(0, 1)]}),
        (ElementaryJob("b", 3, (f,), CommandWork("true", stdout="../x.log")), {}),
        (ElementaryJob("b", 4, (f,), CommandWork("'unclosed")), {}),
    ]
    # Its file reported done (a command's files have no event count): it runs all the same.
    done_already = ElementaryJob("b", 5, (f,), CommandWork("false"))

    async def main() -> None:
        runner = make_runner(rec, scheduler_address, tmp_path)
        await runner.start()
        try:
            for job, done in jobs:
                runner.submit(job, done)
            runner.submit(done_already, {f.url: [(0, 10), (10, f.n_events)]})
            assert runner.cancel("b.0") is False
            await rec.wait_final("b.5")
        finally:
            await runner.stop()

    asyncio.run(main())
    logs = []
    for job, _ in jobs:
        assert rec.states(job.id) == [JobState.FAILED]
        final = rec.final(job.id)
        assert final is not None
        logs.append(final[3])
    assert "processor" in logs[0]
    assert "nowhere.py" in logs[0]
    assert f"outside [0, {f.n_events})" in logs[1]
    assert "not a file of job" in logs[2]
    assert "process.stdout" in logs[3]
    assert "outside the configured roots" in logs[3]
    assert "command" in logs[4]
    assert rec.states("b.5") == [JobState.QUEUED, JobState.RUNNING, JobState.FAILED]
    final = rec.final("b.5")
    assert final is not None
    assert "exited with code 1" in final[3]


def test_every_root_takes_outputs_and_a_users_own_directory_only(
    data: tuple[Path, list[FileRef]], scheduler_address: str, tmp_path: Path
) -> None:
    _, files = data
    first, second = tmp_path / "a", tmp_path / "b"
    for root in (first, second):
        (root / "ann").mkdir(parents=True)
        root.chmod(0o755)
        (root / "ann").chmod(0o777)  # the jobs' account writes there
    rec = Recorder()
    job = ElementaryJob(
        "o",
        0,
        (files[0],),
        CommandWork("echo $USER $JOBID", stdout=f"{second}/ann/$JOBID.out"),
        user="ann",
    )
    elsewhere = ElementaryJob(
        "o", 1, (files[0],), CommandWork("true", stdout=f"{second}/bob.out"), user="ann"
    )

    async def main() -> None:
        runner = make_runner(rec, scheduler_address, tmp_path, user_dirs=True)
        runner.roots = [first.resolve(), second.resolve()]
        await runner.start()
        try:
            runner.submit(job)
            runner.submit(elsewhere)
            await rec.wait_final(job.id)
        finally:
            await runner.stop()

    asyncio.run(main())
    assert rec.states(job.id)[-1] == JobState.COMPLETED, rec.final(job.id)
    assert (second / "ann" / "o_0.out").read_text() == "ann o_0\n"
    final = rec.final(elsewhere.id)
    assert final is not None
    assert final[1] == JobState.FAILED
    assert "your own directory" in final[3]
    assert not (second / "bob.out").exists()
