"""The command line against a running service (``datasched serve``): ``submit``,
``status``, ``cancel``, ``logs``, ``result`` (and ``catalog query --server``).

The server is ``--server`` (default ``$DATASCHED_SERVER``, else http://127.0.0.1:8765) and
the token ``--token`` (default ``$DATASCHED_TOKEN``). The server's errors are printed one
``field: reason`` line each on stderr, with a non-zero exit.
"""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.live import Live
from rich.table import Table

from datasched.cli.app import app
from datasched.cli.common import check_out_dir, err, fail, out

__all__ = ["ApiClient", "ServerOpt", "TokenOpt"]

DEFAULT_SERVER = "http://127.0.0.1:8765"
FINAL = {"completed", "aborted", "failed", "refused"}

ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        help=f"The service's URL. Default: $DATASCHED_SERVER, else {DEFAULT_SERVER}.",
        show_default=False,
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", help="Your token. Default: $DATASCHED_TOKEN.", show_default=False),
]


class ApiClient:
    """Calls to the API; each failure ends the command with the server's errors."""

    def __init__(self, server: str | None, token: str | None, *, need_token: bool = True):
        import httpx

        self.server = (server or os.environ.get("DATASCHED_SERVER") or DEFAULT_SERVER).rstrip("/")
        token = token or os.environ.get("DATASCHED_TOKEN")
        if need_token and not token:
            fail("--token: missing (or set DATASCHED_TOKEN); 'datasched users add' makes one")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=f"{self.server}/api/v1", headers=headers, timeout=60)

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The response to ``method path``, if it succeeded."""
        import httpx

        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            fail(f"--server: cannot reach {self.server}: {exc}", code=1)
        if r.status_code >= 400:
            self.refused(r)
        return r

    def refused(self, r: Any) -> NoReturn:
        """Print the server's errors (``field: reason``) and exit 1."""
        body = r.json() if _is_json(r) else {}
        errors = body.get("errors") or [
            {"field": "server", "reason": f"HTTP {r.status_code}: {r.text[:200]}"}
        ]
        if body.get("id"):
            err.print(f"request {body['id']}: {body.get('state')}", highlight=False)
        for e in errors:
            field = e.get("field") or "error"
            err.print(f"{field}: {e.get('reason')}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _is_json(r: Any) -> bool:
    return str(r.headers.get("content-type", "")).startswith("application/json")


def _content_type(path: Path, text: str) -> str:
    if path.suffix.lower() == ".xml" or text.lstrip().startswith("<"):
        return "application/xml"
    return "application/yaml"


@app.command("submit")
def submit(
    file: Annotated[Path, typer.Argument(help="A request: STAR's XML, or YAML.")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Submit a meta-job request; prints its id. A refused request's errors are printed
    one per line (field: reason)."""
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"FILE: {file}: {exc.strerror or exc}")
    except UnicodeDecodeError:
        fail(f"FILE: {file}: not UTF-8 text")
    with ApiClient(server, token) as client:
        r = client.call(
            "POST", "/requests", content=text, headers={"Content-Type": _content_type(file, text)}
        )
    out.print(r.json()["id"], highlight=False)


def _requests_table(rows: list[dict[str, Any]]) -> Table:
    table = Table("id", "owner", "state", "title", "created")
    for r in rows:
        table.add_row(r["id"], r["owner"], r["state"], r["title"], r["created"][:19])
    return table


def _request_table(req: dict[str, Any]) -> Table:
    p = req["progress"]
    table = Table(
        "job",
        "state",
        "node",
        "events",
        "packets",
        "files",
        title=f"{req['id']} ({req['owner']}) {req['state']}: {p['events']}/{p['events_total']} "
        f"events, {p['packets']} packets, {p['bytes']} bytes",
    )
    for j in req["jobs"]:
        jp = j["progress"]
        table.add_row(
            j["id"],
            j["state"],
            j["node"] or "",
            f"{jp['events']}/{jp['events_total']}",
            str(jp["packets"]),
            str(len(j["files"])),
        )
    return table


@app.command("status")
def status(
    request_id: Annotated[str | None, typer.Argument(help="A request (none: all yours).")] = None,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until it ends.")] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between refreshes.")] = 1.0,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Your requests, or one request: its state, elementary jobs (node, state, files) and
    progress. With --watch, a live table until the request ends."""
    with ApiClient(server, token) as client:
        _status(client, request_id, watch, interval)


def _status(client: ApiClient, request_id: str | None, watch: bool, interval: float) -> None:
    def table() -> tuple[Table, bool]:
        if request_id is None:
            rows = client.call("GET", "/requests").json()["requests"]
            return _requests_table(rows), all(r["state"] in FINAL for r in rows)
        req = client.call("GET", f"/requests/{request_id}").json()
        for e in req.get("errors") or []:
            err.print(f"{e['field']}: {e['reason']}", markup=False, highlight=False)
        return _request_table(req), req["state"] in FINAL

    shown, done = table()
    if not watch or done:
        out.print(shown)
        return
    with Live(shown, console=out, refresh_per_second=4) as live:
        while not done:
            time.sleep(interval)
            shown, done = table()
            live.update(shown)


@app.command("cancel")
def cancel(
    request_id: Annotated[str, typer.Argument(help="The request to cancel.")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel a request: its unfinished elementary jobs stop (aborted)."""
    with ApiClient(server, token) as client:
        r = client.call("DELETE", f"/requests/{request_id}")
    out.print(f"{request_id}: {r.json()['state']}", highlight=False)


@app.command("logs")
def logs(
    request_id: Annotated[str, typer.Argument(help="The request.")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Each elementary job's log, and the file that failed, if one did."""
    with ApiClient(server, token) as client:
        data = client.call("GET", f"/requests/{request_id}/logs").json()
    for e in data.get("errors") or []:
        out.print(f"{e['field']}: {e['reason']}", markup=False, highlight=False)
    for j in data["jobs"]:
        failed = f", failed on {j['failed_file']}" if j["failed_file"] else ""
        out.print(f"== {j['id']} ({j['state']}, {j['node'] or '-'}{failed})", highlight=False)
        if j["log"]:
            out.print(j["log"].rstrip("\n"), markup=False, highlight=False)


@app.command("result")
def result(
    request_id: Annotated[str, typer.Argument(help="A completed request.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to write result.pkl in.")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Write a completed request's merged result to DIR/result.pkl. If the server does not
    unpickle it (it holds your own classes), the packets are fetched and merged here."""
    from datasched.runtime.outputs import merge_all, write_output

    check_out_dir(out_dir)
    with ApiClient(server, token) as client:
        r = client.http.get(f"/requests/{request_id}/result")
        if r.status_code == 409 and _is_json(r) and r.json()["errors"][0]["field"] == "result":
            r = client.call("GET", f"/requests/{request_id}/result", params={"packets": "true"})
            merged = merge_all(pickle.loads(b) for b in pickle.loads(r.content))
        elif r.status_code >= 400:
            client.refused(r)
        else:
            merged = pickle.loads(r.content)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_output(merged, out_dir / "result.pkl")
    out.print(str(out_dir / "result.pkl"), highlight=False)
