"""``datasched whatif``: how the current queue would finish under other policies, predicted
by the simulator from the live cluster's state (a snapshot file, or the server's)."""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from datasched.cli.app import app
from datasched.cli.common import fail, out, print_json, server_root
from datasched.cli.options import JsonOpt

__all__: list[str] = []

TIMEOUT_S = 60.0
"""How long to wait for the server's answer."""


def _params(policies: list[str], items: list[str], *, files: bool) -> dict[str, dict[str, Any]]:
    """``-P NAME=VALUE`` for a snapshot here, checked as the daemon checks its ``param``:
    each to every policy that takes it."""
    from datasched.policies.registry import UnknownPolicyError
    from datasched.service.whatif import ParamsError, params_from_text

    try:
        return params_from_text(policies, items, files=files)
    except UnknownPolicyError as exc:
        fail(f"--policy: {exc}")
    except ParamsError as exc:
        fail(f"-P {exc}")


def _from_snapshot(path: Path, policies: list[str], items: list[str]) -> dict[str, Any]:
    from datasched.policies.registry import UnknownPolicyError
    from datasched.service.contracts import ClusterSnapshot, SnapshotError
    from datasched.service.whatif import compare

    params = _params(policies, items, files=True)  # the user's own files, on their machine

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"--snapshot: cannot read {path}: {exc.strerror or exc}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        fail(f"--snapshot: {path} is not JSON: {exc}")
    try:
        snapshot = ClusterSnapshot.from_dict(data)
        return compare(snapshot, policies, params).as_dict()
    except SnapshotError as exc:
        fail(f"--snapshot: {path}: {exc}")
    except UnknownPolicyError as exc:
        fail(f"--policy: {exc}")


def _from_server(
    server: str, token: str | None, policies: list[str], items: list[str]
) -> dict[str, Any]:
    server = server_root(server)
    # The server checks the policies and parameters (it may know policies this client
    # does not) and answers a refused one by field.
    query = urllib.parse.urlencode(
        [*(("policy", p) for p in policies), *(("param", i.strip()) for i in items)]
    )
    url = f"{server}/api/v1/whatif?{query}"
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            body: dict[str, Any] = json.loads(resp.read())
            return body
    except urllib.error.HTTPError as exc:
        detail: Any = exc.reason
        with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
            answer = json.loads(exc.read())
            detail = answer.get("detail", detail)
            if answer.get("errors"):  # the service's form: {"errors": [{field, reason}]}
                detail = "; ".join(f"{e['field']}: {e['reason']}" for e in answer["errors"])
        if isinstance(detail, dict) and "field" in detail:
            detail = f"{detail['field']}: {detail.get('reason', '')}"
        fail(f"--server: {exc.code}: {detail}", code=1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        fail(f"--server: cannot reach {server}: {getattr(exc, 'reason', exc)}", code=1)


def _seconds(value: float | None) -> str:
    if value is None:
        return "fails"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.2f} h"


def _table(result: dict[str, Any], items: list[str]) -> Table:
    policies: list[str] = result["policies"]
    caption = f"with {', '.join(i.strip() for i in items)}" if items else None
    table = Table(
        title="ETA from now",
        caption=caption,
        box=box.SIMPLE_HEAD,
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("request")
    for p in policies:
        table.add_column(p, justify="right")
    for row in result["requests"]:
        table.add_row(row["request"], *(_seconds(row["eta_s"][p]) for p in policies))
    others = (result.get("others") or {}).get("requests")
    if others:  # the server shows a user their own requests only
        table.add_row(f"({others} of other users)", *("" for _ in policies))
    table.add_section()
    table.add_row("makespan", *(_seconds(result["makespan_s"][p]) for p in policies))
    return table


@app.command("whatif")
def whatif(
    policies: Annotated[
        list[str],
        typer.Option(
            "--policy",
            "-p",
            metavar="NAME",
            help="A policy to predict under, repeatable (`datasched policies` lists them).",
        ),
    ],
    snapshot: Annotated[
        Path | None,
        typer.Option(
            "--snapshot",
            metavar="FILE.json",
            help="The cluster's state as a JSON file (the service's snapshot form).",
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            metavar="URL",
            help="Ask the running service (GET /api/v1/whatif) instead of a file. Default: "
            "$DATASCHED_SERVER, with $DATASCHED_TOKEN, when --snapshot is not given.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", metavar="TOKEN", help="The API token for --server."),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            "-P",
            metavar="NAME=VALUE",
            help="A policy parameter, repeatable: it goes to every --policy that takes it "
            "(e.g. -P replication=false for out-of-order); `datasched policies` lists them. "
            "With --server, a parameter naming a file (a performance map) is refused.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """How the current queue would finish under each policy: per request, its predicted
    finish (seconds from the snapshot's time), and when the last job ends. The simulator
    runs what is left of every job from the cluster's live state: its caches, the rates
    measured on each node. -P sets a policy's parameters, as in datasched sweep."""
    if snapshot is not None and server is not None:
        fail("--snapshot, --server: give one of them, not both")
    if snapshot is None and server is None:
        # As the other commands against a server: its address and the token from the
        # environment.
        server = os.environ.get("DATASCHED_SERVER")
        if server is None:
            fail("--snapshot or --server: give one of them (or set DATASCHED_SERVER)")
        token = token or os.environ.get("DATASCHED_TOKEN")
    if token is not None and server is None:
        fail("--token: only with --server")
    if server is not None:
        result = _from_server(server, token, policies, param or [])
    else:
        assert snapshot is not None
        result = _from_snapshot(snapshot, policies, param or [])
    if as_json:
        print_json(result)
    else:
        out.print(_table(result, param or []))
