"""Workers as batch jobs (dask-jobqueue), without a batch system: ``--jobqueue-args`` parsed
and checked, the job script each of Slurm, HTCondor, PBS and LSF would be given, and each
error of ``datasched run --jobqueue`` named. The real Slurm run is in test_slurm.py."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.runtime.batch import (
    BATCH_SYSTEMS,
    JobqueueError,
    JobqueueSpec,
    check_submit_command,
    cluster_kwargs,
    job_script,
    parse_jobqueue_args,
    require_jobqueue,
)
from datasched.runtime.session import ClusterOptions, open_cluster

pytest.importorskip("dask_jobqueue")
runner = CliRunner()


def test_args_are_split_like_a_shell_and_typed() -> None:
    spec = parse_jobqueue_args(
        "slurm",
        [
            "queue=debug account=physics walltime=01:30:00 cores=2",
            "memory=4GiB job_extra_directives='--constraint=ssd fast' wait_s=30",
            "job_extra_directives=--exclusive",
        ],
    )
    assert spec.args == {
        "queue": "debug",
        "account": "physics",
        "walltime": "01:30:00",
        "cores": 2,
        "memory": "4GiB",
        "job_extra_directives": ["--constraint=ssd fast", "--exclusive"],
        "wait_s": 30.0,
    }
    assert spec.wait_s == 30.0
    assert parse_jobqueue_args("lsf", ["mem=1GiB use_stdin=no"]).args == {
        "mem": 2**30,
        "use_stdin": False,
    }


@pytest.mark.parametrize(
    ("kind", "args", "message"),
    [
        ("sge", [], "--jobqueue: unknown batch system 'sge'; known: slurm, htcondor, pbs, lsf"),
        ("slurm", ["partition=debug"], "unknown key 'partition' for slurm; known: account,"),
        ("htcondor", ["queue=long"], "unknown key 'queue' for htcondor"),
        ("slurm", ["cores=0"], "--jobqueue-args: cores: must be at least 1, got 0"),
        ("slurm", ["cores=two"], "cores: must be a whole number, got 'two'"),
        ("pbs", ["memory=lots"], "memory: must be a size such as 4GiB or 500MB, got 'lots'"),
        ("slurm", ["walltime=1h"], "walltime: must be HH:MM:SS (or MM, or MM:SS), got '1h'"),
        ("lsf", ["use_stdin=maybe"], "use_stdin: must be true or false, got 'maybe'"),
        ("slurm", ["wait_s=-1"], "wait_s: must be positive, got -1"),
        ("slurm", ["queue"], "--jobqueue-args: 'queue' is not KEY=VALUE"),
        ("slurm", ["queue=a queue=b"], "--jobqueue-args: queue: given twice"),
        ("slurm", ["queue='a"], '--jobqueue-args: cannot split "queue=\'a"'),
    ],
)
def test_bad_args_are_named(kind: str, args: list[str], message: str) -> None:
    with pytest.raises(JobqueueError) as info:
        parse_jobqueue_args(kind, args)
    assert message in str(info.value)


def test_a_spec_checks_its_keys_when_built_directly() -> None:
    with pytest.raises(JobqueueError, match="unknown key 'disk' for slurm"):
        JobqueueSpec("slurm", {"disk": "1GB"})
    with pytest.raises(ValueError, match="jobqueue: not with a scheduler address"):
        ClusterOptions(jobqueue=JobqueueSpec("slurm"), scheduler_address="tcp://h:8786")


def test_cluster_kwargs_one_worker_a_job_with_stable_names() -> None:
    spec = parse_jobqueue_args(
        "slurm", ["host=127.0.0.1 worker_cache_dir='/scratch/$USER/c' job_script_prologue=a"]
    )
    kwargs = cluster_kwargs(spec, threads=3, memory="1GiB", cache_bytes=10**9)
    assert kwargs == {
        "name": "datasched-slurm",
        "job_name": "datasched-worker",
        "cores": 3,
        "memory": "1GiB",
        "processes": 1,
        # No dashboards; Dask's HTTP servers on loopback, the scheduler's and the workers'.
        "scheduler_options": {
            "dashboard_address": "127.0.0.1:0",
            "dashboard": False,
            "host": "127.0.0.1",
        },
        "worker_extra_args": ["--no-dashboard", "--dashboard-address", "127.0.0.1:0"],
        "job_script_prologue": ["a", 'export DATASCHED_CACHE_DIR="/scratch/$USER/c"'],
    }
    odd = parse_jobqueue_args("pbs", ["""worker_cache_dir='/s/a"b`c'"""])
    (line,) = cluster_kwargs(odd, threads=1, memory="1GiB", cache_bytes=1)["job_script_prologue"]
    assert line == r'export DATASCHED_CACHE_DIR="/s/a\"b\`c"'
    # HTCondor needs a disk request: the worker's cache, unless given.
    condor = cluster_kwargs(
        JobqueueSpec("htcondor"), threads=1, memory="1GiB", cache_bytes=5 * 10**9
    )
    assert condor["disk"] == "5000000000"


SCRIPTS = {
    "slurm": (
        ["queue=debug account=phys walltime=01:00:00 job_extra_directives=--exclusive"],
        [
            "#SBATCH -p debug",
            "#SBATCH -A phys",
            "#SBATCH -t 01:00:00",
            "#SBATCH --exclusive",
            "#SBATCH --cpus-per-task=2",
            "#SBATCH -J datasched-worker",
        ],
    ),
    "htcondor": (
        ["disk=8GB"],
        ["MY.DaskWorkerCores = 2", "MY.DaskWorkerDisk = 8000000000", "batch_name = "],
    ),
    "pbs": (
        ["queue=short resource_spec=select=1:ncpus=2:mem=4GB walltime=00:10:00"],
        ["#PBS -q short", "#PBS -l select=1:ncpus=2:mem=4GB", "#PBS -l walltime=00:10:00"],
    ),
    "lsf": (
        ["queue=normal project=ana walltime=02:00 ncpus=2"],
        ["#BSUB -q normal", '#BSUB -P "ana"', "#BSUB -W 02:00", "#BSUB -n 2"],
    ),
}


@pytest.mark.parametrize("kind", sorted(BATCH_SYSTEMS))
def test_job_script_of_each_batch_system(kind: str) -> None:
    args, lines = SCRIPTS[kind]
    spec = parse_jobqueue_args(kind, [*args, "worker_cache_dir=/tmp/w"])
    script = job_script(spec, threads=2, memory="4GiB", scheduler_address="tcp://10.0.0.1:8786")
    for line in lines:
        assert line in script, f"{line!r} not in\n{script}"
    worker = f"distributed.cli.dask_worker tcp://10.0.0.1:8786 --name datasched-{kind}-0"
    assert worker in script
    assert "--nthreads 2 --memory-limit 4.00GiB" in script
    export = 'export DATASCHED_CACHE_DIR="/tmp/w"'
    # HTCondor's submit file doubles the quotes inside its Arguments.
    assert (export.replace('"', '""') if kind == "htcondor" else export) in script


def test_missing_submit_command_and_missing_dask_jobqueue_are_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JobqueueError, match="the submit command 'qsub' is not found on PATH"):
        check_submit_command(JobqueueSpec("pbs"))
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)
    with pytest.raises(JobqueueError, match=r"dask-jobqueue is not installed .*pip install"):
        require_jobqueue()


def _fake_submitter(directory: Path) -> None:
    """``sbatch`` that keeps the job script it is given (``script``: the last one) and
    accepts a job which never starts, and ``scancel`` that notes what it was asked to
    cancel."""
    directory.mkdir()
    cancelled = directory / "cancelled"
    for name, body in (
        ("sbatch", f"cat \"$1\" > {directory / 'script'}\necho 'Submitted batch job 42'"),
        ("scancel", f'echo "$@" >> {cancelled}'),
    ):
        path = directory / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)


def test_workers_that_never_start_are_an_error_after_wait_s(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_submitter(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    shared = tmp_path / "shared"  # the nodes would read the credentials here
    shared.mkdir()
    spec = parse_jobqueue_args("slurm", [f"host=127.0.0.1 wait_s=1 tls_dir={shared}"])
    opts = ClusterOptions(workers=2, cache_root=tmp_path / "c", jobqueue=spec)

    async def start() -> None:
        async with open_cluster(opts):
            pass

    with pytest.raises(JobqueueError, match="0 of 2 workers started within 1 s"):
        asyncio.run(start())
    # Both jobs submitted, and cancelled when the cluster closed.
    assert (tmp_path / "bin" / "cancelled").read_text().split() == ["42", "42"]
    # A job's worker joins the scheduler over TLS with the workers' credentials, by path in
    # the private directory under tls_dir (gone now, with the cluster), and keeps its
    # dashboard off and its HTTP server on loopback.
    words = (tmp_path / "bin" / "script").read_text().split()
    scheduler = words[words.index("distributed.cli.dask_worker") + 1]
    assert scheduler.startswith("tls://127.0.0.1:")
    paths = {o: Path(words[words.index(o) + 1]) for o in ("--tls-ca-file", "--tls-cert")}
    paths["--tls-key"] = Path(words[words.index("--tls-key") + 1])
    assert {o: p.name for o, p in paths.items()} == {
        "--tls-ca-file": "ca.pem",
        "--tls-cert": "worker.pem",
        "--tls-key": "worker-key.pem",
    }
    assert {p.parent.parent for p in paths.values()} == {shared}
    assert list(shared.iterdir()) == []
    i = words.index("--dashboard-address")
    assert words[i - 1 : i + 2] == ["--no-dashboard", "--dashboard-address", "127.0.0.1:0"]


def test_a_batch_system_that_refuses_the_jobs_is_an_error_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # sbatch installed, no controller: every submission fails. One line naming the
    # command's own message, long before wait_s (600 s), and nothing left running.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(
        "#!/bin/sh\necho 'sbatch: fatal: Could not establish a configuration source' >&2\nexit 1\n"
    )
    sbatch.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    shared = tmp_path / "shared"
    shared.mkdir()
    spec = parse_jobqueue_args("slurm", [f"host=127.0.0.1 tls_dir={shared}"])
    assert spec.wait_s == 600
    opts = ClusterOptions(workers=2, cache_root=tmp_path / "c", jobqueue=spec)

    async def start() -> None:
        async with open_cluster(opts):
            pass

    async def bounded() -> None:
        await asyncio.wait_for(start(), timeout=60)  # far under wait_s: refused at once

    message = (
        r"--jobqueue slurm: the batch system refused the workers' jobs "
        r"\(sbatch: fatal: Could not establish a configuration source\)"
    )
    with pytest.raises(JobqueueError, match=message):
        asyncio.run(bounded())
    assert list(shared.iterdir()) == []  # the cluster closed, its credentials gone


def test_a_tls_dir_that_cannot_hold_the_credentials_is_named(tmp_path: Path) -> None:
    spec = parse_jobqueue_args("slurm", [f"tls_dir={tmp_path / 'absent'}"])
    opts = ClusterOptions(workers=1, cache_root=tmp_path / "c", jobqueue=spec)

    async def start() -> None:
        async with open_cluster(opts):
            pass

    with pytest.raises(JobqueueError, match="--jobqueue-args: tls_dir: cannot make a private"):
        asyncio.run(start())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobqueue", "torque"], "--jobqueue: unknown batch system 'torque'"),
        (["--jobqueue", "slurm", "--scheduler", "tcp://h:1"], "--jobqueue: not with --scheduler"),
        (["--jobqueue-args", "queue=a"], "--jobqueue-args: needs --jobqueue"),
        (["--jobqueue", "slurm", "--jobqueue-args", "nodes=2"], "unknown key 'nodes' for slurm"),
        (["--jobqueue", "pbs"], "the submit command 'qsub' is not found on PATH"),
    ],
)
def test_cli_errors(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", str(tmp_path / "jobs.yaml"), *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert not (tmp_path / ".datasched-cache").exists()


def test_cli_names_a_missing_dask_jobqueue(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)
    result = runner.invoke(app, ["run", str(tmp_path / "j.yaml"), "--jobqueue", "slurm"])
    assert result.exit_code == 2
    assert "--jobqueue: dask-jobqueue is not installed" in result.stderr
