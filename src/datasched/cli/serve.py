"""The service's administration commands: ``datasched serve`` (the daemon), and the
``users`` and ``catalog`` groups with the store they share (``--db``); their commands are in
:mod:`datasched.cli.users` (users, groups, tokens) and :mod:`datasched.cli.catalog` (scan
storage, import a YAML catalog, query, locally or through a server).

The service's packages (FastAPI, SQLAlchemy, Alembic) are imported when a command runs, so
the rest of the command line works without the ``service`` extra.
"""

from __future__ import annotations

import errno
import importlib
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from datasched.cli.app import app
from datasched.cli.common import err, fail, reachable_scheduler
from datasched.cli.options import (
    JobqueueArgsOpt,
    JobqueueOpt,
    PolicyOpt,
    TlsCaOpt,
    TlsCertOpt,
    TlsKeyOpt,
    jobqueue_spec,
    tls_files_of,
)

if TYPE_CHECKING:
    from datasched.sandbox.confine import Confinement
    from datasched.service.daemon import Runner
    from datasched.service.store.db import Store

__all__ = ["catalog_app", "open_store", "users_app"]

DEFAULT_DB = "datasched-service.db"
DEFAULT_RUNNER = "datasched.service.threaded:make_runner"

users_app = typer.Typer(
    help="Users of the service: each has a token (shown once) and a group.",
    no_args_is_help=True,
)
catalog_app = typer.Typer(
    help="The file catalog: datasets with metadata and their files.", no_args_is_help=True
)
app.add_typer(users_app, name="users")
app.add_typer(catalog_app, name="catalog")

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help=f"The store: a database URL (sqlite:///..., postgresql://...) or a SQLite file "
        f"path. Default: $DATASCHED_DB, else ./{DEFAULT_DB}.",
        show_default=False,
    ),
]


def open_store(db: str | None) -> Store:
    """The store named by ``--db`` (or the default), at the newest schema."""
    try:
        from datasched.service.store.db import (
            Store,
            StoreError,
            StoreUnavailable,
            masked_url,
            scrub,
        )
    except ModuleNotFoundError as exc:
        fail(f"the service is not installed ({exc.name}): pip install 'datasched[service]'")
    url = db or os.environ.get("DATASCHED_DB") or DEFAULT_DB
    # Every message naming the store shows its URL with the password masked.
    try:
        return Store(url)
    except StoreUnavailable as exc:  # a database that cannot be reached or upgraded
        fail(scrub(str(exc), url), code=1)
    except StoreError as exc:
        fail(scrub(str(exc), url))
    except Exception as exc:  # anything else on the way: its text scrubbed as well
        reason = scrub(f"{type(exc).__name__}: {exc}", url)
        fail(f"--db: cannot open the store {masked_url(url)}: {reason}", code=1)


def _load(spec: str, option: str) -> Any:
    """The object ``module:attr`` names (the runner's and the language's factories)."""
    module, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ModuleNotFoundError, AttributeError) as exc:
        fail(f"{option}: cannot load {spec!r}: {exc}")


@app.command("serve")
def serve(
    db: DbOpt = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8765,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Local Dask workers to start (or --scheduler).")
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(
            help="A running Dask scheduler (tcp://host:port, or tls://host:port with "
            "--tls-ca-file, --tls-cert, --tls-key). The cluster the daemon starts itself "
            "(--workers) is closed: TLS with credentials made for it, nothing on other "
            "interfaces than loopback."
        ),
    ] = None,
    tls_ca_file: TlsCaOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    jobqueue: JobqueueOpt = None,
    jobqueue_args: JobqueueArgsOpt = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Where workers keep their node caches.")
    ] = None,
    cache_gb: Annotated[
        float | None, typer.Option(min=0.0, help="Each worker's cache, in GB (default 2).")
    ] = None,
    policy: PolicyOpt = "out-of-order",
    roots: Annotated[
        list[Path] | None,
        typer.Option(
            "--roots",
            metavar="DIR",
            help="A directory that paths in requests must lie under (repeatable).",
        ),
    ] = None,
    split: Annotated[
        str, typer.Option(help="How requests become elementary jobs by default.")
    ] = "by-policy",
    runner: Annotated[
        str, typer.Option(help="The runner's factory, module:attr.", hidden=True)
    ] = DEFAULT_RUNNER,
    language: Annotated[
        str | None,
        typer.Option(help="The request language's factory, module:attr.", hidden=True),
    ] = None,
    max_request_kb: Annotated[
        int,
        typer.Option(
            min=1,
            help="Largest request body, in kB (1000 bytes); a larger one is answered 413 "
            "as soon as it passes the limit, unread beyond it.",
        ),
    ] = 1000,
    max_json_kb: Annotated[
        int,
        typer.Option(min=1, help="Largest body of any other API call (JSON), in kB."),
    ] = 64,
    rate: Annotated[float, typer.Option(min=0.0, help="API calls a second per user.")] = 20.0,
    burst: Annotated[int, typer.Option(min=1, help="API calls at once per user.")] = 40,
    max_pending: Annotated[
        int,
        typer.Option(
            min=1,
            help="Requests of a user not yet final (pending, queued, running); past it a "
            "submission is refused (429, field 'pending') and not stored.",
        ),
    ] = 100,
    refused_keep: Annotated[
        int,
        typer.Option(
            min=1, help="Refused requests kept per user (for their reasons); the oldest go."
        ),
    ] = 50,
    refused_days: Annotated[
        float,
        typer.Option(min=0.0, help="Days a refused request is kept before it is deleted."),
    ] = 7.0,
    refused_body_kb: Annotated[
        int,
        typer.Option(
            min=0, help="kB of a refused request's body kept; the rest is cut (and said so)."
        ),
    ] = 16,
    packets_mb: Annotated[
        float,
        typer.Option(
            min=0.001,
            help="Most MB of packets' results one call of 'result?packets=true' is served "
            "(they are held in the daemon's memory); past it 409 (field 'packets').",
        ),
    ] = 256.0,
    whatif_budget_s: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Seconds of simulation one what-if call may take (its policies together); "
            "past it the call is refused (400, field 'policy').",
        ),
    ] = 10.0,
    max_held: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Elementary jobs handed to the runner at a time; the rest wait in the store "
            "and go by fair share. Default: twice the cluster's slots.",
        ),
    ] = None,
    usage_half_life: Annotated[
        float,
        typer.Option(
            min=0.001,
            help="Half-life, in seconds, of the groups' CPU usage behind fair share.",
        ),
    ] = 3600.0,
    run_as: Annotated[
        str | None,
        typer.Option(
            help="The account without privileges that users' jobs run as (never the "
            "daemon's own; needed when the daemon runs as root).",
            rich_help_panel="Confinement of users' code",
        ),
    ] = None,
    no_sandbox: Annotated[
        bool,
        typer.Option(
            "--no-sandbox",
            help="Run users' code without bubblewrap: only for a single user's own machine "
            "(warns at every start).",
            rich_help_panel="Confinement of users' code",
        ),
    ] = False,
    job_network: Annotated[
        bool,
        typer.Option(
            "--job-network",
            help="Let jobs use the network (by default they have none).",
            rich_help_panel="Confinement of users' code",
        ),
    ] = False,
    job_memory_gb: Annotated[
        float,
        typer.Option(
            min=0.25,
            help="Memory (address space) of each process of a job, in GiB.",
            rich_help_panel="Confinement of users' code",
        ),
    ] = 4.0,
    job_cpu_h: Annotated[
        float,
        typer.Option(
            min=0.0001,
            help="CPU time of a job, in hours (all its packets).",
            rich_help_panel="Confinement of users' code",
        ),
    ] = 24.0,
    job_wall_h: Annotated[
        float,
        typer.Option(
            min=0.0001,
            help="Wall time of a job from its first packet, in hours.",
            rich_help_panel="Confinement of users' code",
        ),
    ] = 24.0,
    job_processes: Annotated[
        int,
        typer.Option(
            min=1,
            help="Processes (and threads) a job may run at once on a node.",
            rich_help_panel="Confinement of users' code",
        ),
    ] = 256,
    check_timeout: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="Seconds a processor may take to load (in a sandbox) when its request is checked.",
            rich_help_panel="Confinement of users' code",
        ),
    ] = 60.0,
) -> None:
    """Run the service's daemon: the API (/api/v1) and the loop handing requests' elementary
    jobs to the runner. The store is upgraded to the newest schema first; what was running
    before a restart is resumed from the event ranges already done.

    Users' code (processors, commands) never runs in the daemon: it runs on the workers, in
    a bubblewrap sandbox, as the --run-as account, with the job's limits (docs/security.md)."""
    if workers is not None and scheduler is not None:
        fail("--workers and --scheduler: give one or the other")
    tls = tls_files_of(scheduler, tls_ca_file, tls_cert, tls_key)
    batch = jobqueue_spec(jobqueue, jobqueue_args, scheduler)
    from datasched.policies import available

    if policy not in available():
        fail(f"--policy: unknown policy {policy!r}; `datasched policies` lists them")
    if scheduler is not None:  # one line now, before the store is opened
        reachable_scheduler(scheduler, tls)
    try:
        import uvicorn

        from datasched.service.api.deps import Limits
        from datasched.service.app import build_state, create_app
        from datasched.service.contracts import SplitStrategy
        from datasched.service.ports import ContractLanguage
    except ModuleNotFoundError as exc:
        fail(f"the service is not installed ({exc.name}): pip install 'datasched[service]'")
    try:
        strategy = SplitStrategy(split)
    except ValueError:
        fail(f"--split: {split!r} is not one of {', '.join(s.value for s in SplitStrategy)}")
    roots = [r.resolve() for r in roots or []]
    for r in roots:  # else the workers' sandboxes fail to start, minutes later
        if not r.is_dir():
            fail(f"--roots: {r} is not a directory" + ("" if r.exists() else " (no such path)"))
    runner_factory = _load(runner, "--runner")
    confine = _confinement(
        run_as=run_as,
        no_sandbox=no_sandbox,
        network=job_network,
        memory_gb=job_memory_gb,
        cpu_h=job_cpu_h,
        wall_h=job_wall_h,
        processes=job_processes,
    )
    many = confine.bwrap  # a daemon of several users: each writes in their own directory
    if language is None:
        from datasched.service.usercode import SandboxCheck, SandboxCounter

        check = SandboxCheck(confine, roots, timeout_s=check_timeout)
        count = SandboxCounter(confine, timeout_s=check_timeout)
        lang = ContractLanguage(roots, user_dirs=many, code_check=check, count_events=count)
    else:
        lang = _load(language, "--language")()
    # The port first, then the store held for this daemon alone: a daemon that cannot serve
    # leaves the store as it found it (the runner resumes running jobs as it is built).
    listening = _listen(host, port)
    with listening:  # closed however this ends
        store = open_store(db)
        claim_store(store)
        the_runner: Runner = runner_factory(
            workers=workers,
            scheduler=scheduler,
            cache_dir=cache_dir,
            roots=roots,
            policy=policy,
            jobqueue=batch,
            cache_gb=cache_gb,
            confine=confine,
            user_dirs=many,
            **(
                {}
                if tls is None
                else {"tls_ca_file": tls.ca, "tls_cert": tls.cert, "tls_key": tls.key}
            ),
        )
        state = build_state(
            store,
            lang,
            runner=the_runner,
            split=strategy,
            limits=Limits(
                max_request_bytes=max_request_kb * 1000,
                rate_per_s=rate,
                burst=burst,
                max_json_bytes=max_json_kb * 1000,
                max_pending=max_pending,
                refused_keep=refused_keep,
                refused_days=refused_days,
                refused_body_bytes=refused_body_kb * 1000,
                whatif_budget_s=whatif_budget_s,
                max_packets_result_bytes=round(packets_mb * 1e6),
            ),
            policy=policy,
            max_held=max_held,
            usage_half_life_s=usage_half_life,
        )
        shown = f"[{host}]" if ":" in host else host
        where = f"{shown}:{listening.getsockname()[1]}"  # the port given, or the one --port 0 got
        err.print(
            f"datasched serve: the API at http://{where}/api/v1, the dashboard at "
            f"http://{where}/dashboard (store {store.shown_url})",
            highlight=False,
            soft_wrap=True,
        )
        server = uvicorn.Server(uvicorn.Config(create_app(state), log_level="warning"))
        server.run(sockets=[listening])
        store.close()


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` for the API, or one line naming the option and exit 2
    (a port in use, an address not of this machine)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        fail(f"--host: {host!r} is not an address of this machine: {exc.strerror}")
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        what = "--port" if exc.errno == errno.EADDRINUSE else "--host"
        fail(f"{what}: cannot listen on {host}:{port}: {exc.strerror or exc}")
    return sock  # not inheritable: no process started from here gets the API's socket


def claim_store(store: Store) -> None:
    """Hold ``store`` for this daemon (:meth:`Store.claim`), or one line and exit 2."""
    from datasched.service.store.db import StoreBusy

    try:
        store.claim()
    except StoreBusy as exc:
        store.close()
        fail(str(exc))


def _confinement(
    *,
    run_as: str | None,
    no_sandbox: bool,
    network: bool,
    memory_gb: float,
    cpu_h: float,
    wall_h: float,
    processes: int,
) -> Confinement:
    """The confinement of users' code from ``serve``'s options; refuses (exit 2, saying
    what to do) when no sandbox can be made, or when a root daemon has no account to run
    jobs as."""
    from datasched.sandbox.confine import Confinement, account, sandbox_problem
    from datasched.sandbox.run import selftest

    limits = {
        "network": network,
        "memory_bytes": int(memory_gb * (1 << 30)),
        "cpu_s": cpu_h * 3600.0,
        "wall_s": wall_h * 3600.0,
        "processes": processes,
    }
    if no_sandbox:
        err.print(
            "datasched serve: WARNING: --no-sandbox: users' code runs unconfined, as the "
            "workers' account, with the daemon's machine in view; use it only on a machine of "
            "your own, for yourself alone (docs/security.md)",
            style="bold red",
            highlight=False,
            soft_wrap=True,
        )
        return Confinement(bwrap=False, **limits)  # type: ignore[arg-type]
    problem = sandbox_problem()
    if problem is not None:
        fail(f"users' code cannot be confined: {problem}")
    if os.geteuid() != 0:
        fail(
            "users' jobs never run as the daemon's own account: start the daemon as root "
            "with --run-as ACCOUNT (an account without privileges), or, for yourself alone "
            "on your own machine, --no-sandbox"
        )
    if run_as is None:
        fail(
            "--run-as: users' jobs need an account without privileges to run as (e.g. "
            "useradd --system --no-create-home datasched-job, then --run-as datasched-job)"
        )
    try:
        account(run_as)
    except ValueError as exc:
        fail(f"--run-as: {str(exc).removeprefix('run_as: ')}")
    confine = Confinement(run_as=run_as, **limits)  # type: ignore[arg-type]
    problem = selftest(confine)
    if problem is not None:
        fail(f"users' code cannot be confined as {run_as}: {problem}")
    return confine
