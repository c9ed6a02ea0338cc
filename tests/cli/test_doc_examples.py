"""Every example runs as written: each command line of the console blocks of README.md and
docs/*.md (tests/doc_examples.py finds them) is either run here, in a fresh directory
with the demo's data, or covered by a named test, and the table below says which.

* ``RUN``: run in the default test run (the quick ones, a few seconds in all);
* ``SLOW``: run under ``-m slow`` (simulations of minutes, the runtime's embedded cluster);
* ``SETUP``: what the directory is made of (a file the page shows, written from its output);
* ``CI``: the set-up and the checks themselves (``make test``, the pre-commit hooks), which
  CI runs (.ci/run);
* ``tests/...::test_name``: a command that needs what no fresh directory has (a daemon, a
  cluster on other hosts, a batch system, the user's own paths), covered by that test.

A new command line in the docs that is in no row fails ``test_every_example_is_in_the_table``;
a row whose command left the docs fails it too, so the table is the list of examples.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from doc_examples import REPO, Example, all_examples

RUN = "run"
SLOW = "slow"
SETUP = "setup"
CI = "ci"
COFFEA_DOCS = "tests/runtime/test_schemas.py::test_nanoaod_jobs_on_the_demo_data_every_event_once"

SERVICE_CLI = "tests/service/test_service_cli.py::test_the_client_commands_against_a_daemon"
SERVICE_GROUPS = "tests/service/test_service_cli.py::test_groups_set_and_list_against_a_daemon"
SERVICE_USERS = (
    "tests/service/test_service_cli.py::test_users_add_prints_a_token_once_and_list_shows_the_users"
)
SERVICE_USERS_ADMIN = (
    "tests/service/test_service_cli.py::test_users_remove_and_set_against_a_daemon"
)
SERVICE_CATALOG = "tests/service/test_service_cli.py::test_catalog_scan_import_and_query"
SERVE = (
    "tests/service/test_serve_restart.py::"
    "test_serve_killed_mid_request_resumes_and_counts_every_event_once"
)
API = (
    "tests/service/test_api.py::"
    "test_a_request_runs_to_completion_with_its_progress_and_merged_result"
)
API_CANCEL = "tests/service/test_api.py::test_cancel_aborts_a_running_request"
EXISTING = (
    "tests/runtime/test_clusters.py::test_each_run_on_an_existing_cluster_gets_its_own_settings"
)
EXISTING_TLS = (
    "tests/runtime/test_tls.py::test_run_joins_an_existing_tls_cluster_with_the_users_files"
)
SWEEP_DASK = "tests/cli/test_cli.py::test_a_sweep_on_a_dask_cluster_writes_what_a_local_one_does"
SLURM = "tests/runtime/test_slurm.py::test_slurm_workers_give_the_local_clusters_results"
REQUEST_CHECK = "tests/service/test_request_cli.py::test_check_prints_the_elementary_jobs"
WHATIF = "tests/service/test_visibility.py::test_the_whatif_command_reads_the_services_answers"

EXAMPLES: dict[str, str] = {
    # README.md and docs/cli.md: the simulator
    "datasched policies": RUN,
    "datasched policies --json": RUN,
    "datasched sim --policy splitting --load 0.05 --pipeline tertiary --json": SLOW,
    "datasched trace generate --out jobs.csv --load 0.8 --jobs 2000": RUN,
    "datasched sim --policy farm --trace jobs.csv": RUN,
    "datasched sim --policy out-of-order --jobs 200 --check --trace-log sched.jsonl": SLOW,
    "datasched trace story sched.jsonl --job 42": SLOW,
    "datasched sim --policy out-of-order --fairness-h 24 --replicate-after 3 --load 1.2": SLOW,
    "datasched sim --policy delayed --period-h 48 --stripe-events 5000 --load 1.5": SLOW,
    "datasched sim --policy cache-splitting --cache-gb 200 --load 0.5": SLOW,
    "datasched max-load --policy splitting --pipeline tertiary": SLOW,
    "datasched sweep --policies farm,splitting,cache-splitting --loads 0.1:1.3:7 "
    "--cache-gb 50,100,200 --out out/fig3": SLOW,
    "datasched reproduce ponce --quick --out out/repro": SLOW,
    "datasched reproduce ponce --out out/full": "tests/studies/test_paper_ponce.py::"
    "test_claim_agrees_with_the_paper",
    "datasched reproduce proof --quick --out out/proof": SLOW,
    "datasched proof-sim --report out/uneven -p basic-packetizer": SLOW,
    "datasched scale --policy splitting --nodes 10,100,1000": SLOW,
    "datasched perf-map --out out/perfmap.json": SLOW,
    "datasched sim --policy adaptive-delay --load 2.5 -P performance_map=out/perfmap.json": SLOW,
    "datasched demo-sim": SLOW,
    "datasched reproduce romosan --quick --out out/romosan": SLOW,
    "datasched cosched solve batch.json --json": RUN,
    "datasched reproduce grid --quick --out out/grid": SLOW,
    "datasched sim --policy out-of-order --slots 4 --file-gb 2 --node-mtbf-h 500 --load 3": SLOW,
    "datasched sim --policy out-of-order --slots 4 --load 3": SLOW,
    "datasched sim --policy cache-splitting --file-gb 2": SLOW,
    "datasched sim --policy out-of-order --node-mtbf-h 500 --node-repair-h 4 --json": SLOW,
    "datasched sim --policy out-of-order --file-gb 5 --replicate-hot 2 --json": SLOW,
    # the runtime, on the demo's data
    "datasched demo-data data/": SLOW,
    # The README's, over the example jobs file demo-data writes beside the data:
    "datasched run data/jobs.yaml --policy out-of-order --workers 4 --cache-gb 2": SLOW,
    "datasched run data/jobs.yaml --json --packets packets.csv": SLOW,
    "datasched run data/jobs.yaml --scheduler tcp://head:8786": EXISTING,
    "datasched run data/jobs.yaml --workers 8 --jobqueue slurm --jobqueue-args "
    '"queue=short walltime=01:00:00"': SLURM,
    "datasched submit data/request.xml": SERVICE_CLI,
    "datasched run jobs.yaml --policy out-of-order --workers 4 --cache-gb 2": SLOW,
    "datasched run jobs.yaml --policy cache-splitting --workers 4 --cache-gb 2": SLOW,
    "datasched run jobs.yaml --json --packets packets.csv": SLOW,
    "datasched run jobs.yaml --report out/report": SLOW,
    "datasched run jobs.yaml --chunksize 50000 --maxchunks 2": SLOW,
    "datasched run jobs.yaml --skip-bad-files --report out/report": SLOW,
    "datasched run jobs.yaml --replicate-hot 2": SLOW,
    "datasched run jobs.yaml --policy out-of-order --replicate-hot 2": SLOW,
    "datasched run jobs.yaml --trace-log sched.jsonl": SLOW,
    "datasched run jobs.yaml --policy mincostflow --workers 4 --cache-gb 20 --lp-period-s 30": SLOW,
    "datasched run jobs.yaml -p adaptive-packetizer -P min_workers=4 "
    "-P quotas=physics=70,students=30 --report out/run": SLOW,
    "datasched demo": SLOW,
    "datasched demo --replicate-hot 2": SLOW,
    # the runtime on clusters that are not here
    "datasched run jobs.yaml --scheduler tcp://head:8786": EXISTING,
    "datasched run jobs.yaml --scheduler tcp://head:8786 --cache-dir /scratch/datasched-cache": (
        EXISTING
    ),
    "datasched run jobs.yaml --scheduler tls://head:8786 --tls-ca-file ca.pem --tls-cert me.pem "
    "--tls-key me-key.pem": EXISTING_TLS,
    "datasched run jobs.yaml --scheduler tls://head:8786 --tls-ca-file ca.pem --tls-cert "
    "scheduler.pem --tls-key scheduler-key.pem": EXISTING_TLS,
    "dask scheduler --port 8786": EXISTING,
    "dask worker tcp://head:8786 --name node01 --nthreads 2": EXISTING,
    "dask scheduler --protocol tls --tls-ca-file ca.pem --tls-cert scheduler.pem --tls-key "
    "scheduler-key.pem": EXISTING_TLS,
    "dask worker tls://head:8786 --name node01 --tls-ca-file ca.pem --tls-cert worker.pem "
    "--tls-key worker-key.pem": EXISTING_TLS,
    "dask worker tcp://head:8786 --nworkers 16 --nthreads 1": SWEEP_DASK,
    "datasched sweep --policies farm,splitting,cache-splitting --loads 0.1:1.5:15 --cache-gb "
    "50,100,200 --out out/fig3 --scheduler tcp://head:8786": SWEEP_DASK,
    'datasched run jobs.yaml --jobqueue slurm --jobqueue-args "queue=short"': SLURM,
    "datasched run jobs.yaml --workers 8 --jobqueue slurm --jobqueue-args "
    '"queue=short account=physics walltime=02:00:00 memory=4GiB" --jobqueue-args '
    '"worker_cache_dir=/scratch/\\$USER/datasched"': SLURM,
    # docs/cosched.md
    "cat batch.json": SETUP,
    "datasched cosched solve batch.json --network full": RUN,
    "python benchmarks/cosched_solver.py": "tests/test_cosched_benchmark.py::"
    "test_a_small_run_solves_every_size_with_every_solver",
    "python benchmarks/cosched_solver.py --files 65536 --servers 32,1024 --repeat 5": (
        "tests/test_cosched_benchmark.py::test_limits_leave_the_slow_solvers_out_and_the_table_says_so"
    ),
    "datasched reproduce romosan --out out/romosan-full --json": "tests/studies/test_romosan.py::"
    "test_the_full_reproduction",
    "make reproduce-romosan": "tests/studies/test_romosan.py::test_the_full_reproduction",
    # docs/proof.md, docs/reproduction.md
    "datasched sim --policy adaptive-packetizer --load 0.5 --jobs 200": SLOW,
    "datasched proof-sim --report out/proof -p basic-packetizer": SLOW,
    "datasched reproduce proof --quick --out out/proof-repro": SLOW,
    "datasched reproduce proof --out docs/proof --json": "tests/studies/test_proof_experiments.py"
    "::test_the_full_reproduction_measures_every_claim",
    "make reproduce": "tests/studies/test_paper_ponce.py::test_claim_agrees_with_the_paper",
    # docs/runtime.md's coffea migration on the NanoAOD-shaped demo data: its files as written
    "datasched demo-data data/ --files 4": COFFEA_DOCS,
    "cp docs/examples/coffea/analysis.py docs/examples/coffea/fileset.json "
    "docs/examples/coffea/jobs.yaml .": COFFEA_DOCS,
    "datasched run jobs.yaml --chunksize 100000 --workers 2": COFFEA_DOCS,
    # docs/deployment.md: the hosts in network namespaces, which .ci/run runs as root
    ".venv/bin/python -m pytest -m hosts tests/hosts -n 2 --dist load": CI,
    # the set-up and the checks: what CI runs (.ci/run: make test, make coverage; the
    # pre-commit hooks are make lint's linters); make demo is `datasched demo` (a row above)
    # and `datasched demo-service` (a row below)
    "make demo": CI,
    "make test": CI,
    ".venv/bin/pre-commit install": CI,
    ".venv/bin/pre-commit run --all-files": CI,
    ".venv/bin/python -m pytest tests/core/test_scheduler.py --cov=datasched "
    "--cov-report=term-missing": CI,
    # requests checked offline: the pages' /data is the user's
    "datasched request check request.xml --roots /data --catalog catalog.yaml": REQUEST_CHECK,
    "datasched request check request.yaml --roots /data --split by-host --json": REQUEST_CHECK,
    "datasched request check my-request.xml --roots /data --catalog catalog.yaml": REQUEST_CHECK,
    "datasched request check my-request.yaml --roots /data --split by-host --json": (REQUEST_CHECK),
    # the service: a daemon, its users and their tokens
    "datasched demo-service": "tests/service/test_demo_service.py::"
    "test_three_users_requests_complete_with_every_event_once",
    "datasched users add ann --group physics": SERVICE_USERS,
    "datasched users add root --group admins --admin": SERVICE_USERS,
    "datasched users set ann --admin": SERVICE_USERS_ADMIN,
    "datasched users set bob --group heavy-ion": SERVICE_USERS_ADMIN,
    "datasched users remove bob": SERVICE_USERS_ADMIN,
    "datasched users remove eve --cancel": "tests/service/test_service_cli.py::"
    "test_users_remove_cancel_shuts_a_hostile_user_out_in_one_step",
    "datasched users list --removed": SERVICE_USERS_ADMIN,
    "export DATASCHED_TOKEN=ds_...": SERVICE_CLI,
    "export TOKEN=ds_5f0c...": API,
    "datasched serve --workers 4 --roots /data --run-as datasched-job": SERVE,
    "datasched serve --db service.db --workers 4 --cache-dir /scratch/cache --roots /data "
    "--run-as datasched-job": SERVE,
    "datasched catalog import catalog.yaml": SERVICE_CATALOG,
    'datasched catalog query "year=2004 system=AuAu energy>=100 minbias"': SERVICE_CATALOG,
    'datasched catalog query "year>=2004" --files': SERVICE_CATALOG,
    'datasched catalog query "system=pp" --server http://daemon:8765 --token $TOKEN': (
        SERVICE_CATALOG
    ),
    'datasched catalog query "colour=red"': SERVICE_CATALOG,
    "datasched submit request.xml": SERVICE_CLI,
    "datasched submit bad.xml": SERVICE_CLI,
    "datasched status": SERVICE_CLI,
    "datasched status 3f2a9c1b7d4e --watch": SERVICE_CLI,
    "datasched logs 3f2a9c1b7d4e": SERVICE_CLI,
    "datasched result 3f2a9c1b7d4e --out results/": "tests/service/test_result_cli.py::"
    "test_a_result_is_written_as_served_and_summarised",
    "datasched cancel 3f2a9c1b7d4e": SERVICE_CLI,
    "datasched groups list": SERVICE_GROUPS,
    "datasched groups set physics --quota 75": SERVICE_GROUPS,
    "datasched groups set physics --quota 75 --token $ADMIN_TOKEN": SERVICE_GROUPS,
    "datasched groups set physics --quota 75 --priority 1 --token $ROOT_TOKEN": SERVICE_GROUPS,
    "datasched groups set heavy-ion --quota 25": SERVICE_GROUPS,
    "datasched whatif --policy farm --policy out-of-order --snapshot state.json": (
        "tests/service/test_whatif_cli.py::test_whatif_table_names_every_request"
    ),
    "datasched whatif -p out-of-order --server http://daemon:8000 --token T --json": WHATIF,
    "datasched whatif -p farm -p mincostflow -P lp_period_s=60 --snapshot state.json": (
        "tests/service/test_whatif_cli.py::test_whatif_sets_policy_parameters_as_sweep_does"
    ),
    "datasched whatif -p farm -p out-of-order --server http://127.0.0.1:8765 --token "
    "$DATASCHED_TOKEN": WHATIF,
    'curl -s -X POST http://127.0.0.1:8765/api/v1/requests -H "Authorization: Bearer $TOKEN" '
    '-H "Content-Type: application/xml" --data-binary @request.xml': API,
    'curl -s http://127.0.0.1:8765/api/v1/requests/3f2a9c1b7d4e -H "Authorization: Bearer '
    '$TOKEN"': API,
    'curl -s -X DELETE http://127.0.0.1:8765/api/v1/requests/3f2a9c1b7d4e -H "Authorization: '
    'Bearer $TOKEN"': API_CANCEL,
}

SECTIONS: dict[tuple[str, str], str] = {}

runner = CliRunner()


def _how(example: Example) -> str:
    return SECTIONS.get((example.page, example.section)) or EXAMPLES.get(example.command, "")


def test_every_example_is_in_the_table() -> None:
    examples = all_examples()
    missing = [str(e) for e in examples if not _how(e)]
    assert not missing, "examples neither run nor mapped:\n" + "\n".join(missing)
    shown = {e.command for e in examples}
    stale = [c for c in EXAMPLES if c not in shown]
    assert not stale, "rows whose example left the docs:\n" + "\n".join(stale)


def test_every_named_test_exists() -> None:
    for how in set(EXAMPLES.values()):
        if "::" not in how:
            continue
        path, name = how.split("::")
        assert re.search(rf"^(async )?def {name}\(", (REPO / path).read_text(), re.M), how


def _setup(directory: Path) -> None:
    """What the pages' examples assume is there: the files they show (batch.json)."""
    for example in all_examples():
        if EXAMPLES.get(example.command) == SETUP:
            name = example.command.split()[-1]
            text = "\n".join(example.output)
            json.loads(text)  # what the page shows is the file
            (directory / name).write_text(text + "\n")


def _run(examples: Iterable[Example]) -> list[str]:
    """Run each example once (the first time it is shown), in page order; what failed."""
    failures = []
    done: set[str] = set()
    for example in examples:
        if example.command in done:
            continue
        done.add(example.command)
        args = shlex.split(example.command)
        assert args[0] == "datasched", example
        result = runner.invoke(app, args[1:])
        shows_error = any(line.startswith("error:") for line in example.output)
        if result.exit_code != (2 if shows_error else 0):
            failures.append(f"{example} -> exit {result.exit_code}: {result.output[-600:]}")
    return failures


def _examples(kinds: set[str]) -> list[Example]:
    return [e for e in all_examples() if EXAMPLES.get(e.command) in kinds]


def test_the_quick_examples_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As a user runs them: without the books' checks the tests switch on (tests/conftest.py).
    monkeypatch.setenv("DATASCHED_VALIDATE", "0")
    monkeypatch.chdir(tmp_path)
    _setup(tmp_path)
    assert not _run(_examples({RUN}))
    assert (tmp_path / "jobs.csv").exists()


JOBS_YAML = """\
catalog: data/catalog.yaml
defaults:
  processor: datasched.runtime.demodata:DimuonMass
jobs:
  - id: zpeak-1
    dataset: zmumu
    events: [0, 60000]
    output: results/zpeak-1.pkl
    user: alice
    user_group: physics
  - id: zpeak-2
    dataset: zmumu
    events: [30000, 90000]
    output: results/zpeak-2.root
    submit_s: 1
    user: bob
    user_group: students
"""
"""The pages' ``jobs.yaml``: two overlapping jobs over the demo's data (docs/runtime.md,
"Jobs", without the jobs whose files are the user's own)."""


@pytest.mark.slow
@pytest.mark.timeout(2400)  # every slow example in turn: reproductions, maps, runs (minutes each)
def test_every_runnable_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("distributed")
    monkeypatch.setenv("DATASCHED_VALIDATE", "0")
    monkeypatch.chdir(tmp_path)
    _setup(tmp_path)
    (tmp_path / "jobs.yaml").write_text(JOBS_YAML)
    examples = _examples({RUN, SLOW})
    # demo-data first: the runtime's examples read what it writes.
    examples.sort(key=lambda e: not e.command.startswith("datasched demo-data"))
    assert not _run(examples)
