"""The command line against a running service (``datasched serve``): ``submit``,
``status``, ``cancel``, ``logs``, ``result`` (and ``catalog query --server``).

The server is ``--server`` (default ``$DATASCHED_SERVER``, else http://127.0.0.1:8765) and
the token ``--token`` (default ``$DATASCHED_TOKEN``). The server's errors are printed one
``field: reason`` line each on stderr, with a non-zero exit.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.live import Live
from rich.table import Table

from datasched.cli.app import app
from datasched.cli.common import check_out_dir, err, fail, out, server_root

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


_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_\-]+")


class ApiClient:
    """Calls to the API; each failure ends the command with the server's errors."""

    def __init__(self, server: str | None, token: str | None, *, need_token: bool = True):
        import httpx

        self.server = server_root(server or os.environ.get("DATASCHED_SERVER") or DEFAULT_SERVER)
        token = (token or os.environ.get("DATASCHED_TOKEN") or "").strip()
        if need_token and not token:
            fail("--token: missing (or set DATASCHED_TOKEN); 'datasched users add' makes one")
        if token and not _TOKEN_CHARS.fullmatch(token):
            # Never echoed: it may be most of a real token.
            fail("--token: not a token (letters, digits, '_' and '-', as 'users add' printed it)")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=f"{self.server}/api/v1", headers=headers, timeout=60)

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The response to ``method path``, whatever its status (exit 1 if unreachable)."""
        import httpx

        try:
            return self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            fail(f"--server: cannot reach {self.server}: {exc}", code=1)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The response to ``method path``, if it succeeded."""
        r = self.request(method, path, **kwargs)
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


def _events(p: dict[str, Any]) -> str:
    """``done/total``, or a dash for a command's job (it reads no events)."""
    return f"{p['events']}/{p['events_total']}" if p["events_total"] else "—"


def _when(at: str | None) -> str:
    """An API time (ISO 8601, UTC) to the second, or a dash."""
    return "—" if not at else at[:19].replace("T", " ")


def _command_table(req: dict[str, Any]) -> Table:
    """A command's request: each job's state, node, start, end and exit status (a command
    reads no events in packets: none of their figures)."""
    table = Table(
        "job",
        "state",
        "node",
        "started (UTC)",
        "ended (UTC)",
        "exit",
        "files",
        title=f"{req['id']} ({req['owner']}) {req['state']}: a command",
    )
    for j in req["jobs"]:
        run = j.get("command") or {}
        code = run.get("exit_code")
        table.add_row(
            j["id"],
            j["state"],
            j["node"] or "",
            _when(run.get("started")),
            _when(run.get("ended")),
            "—" if code is None else str(code),
            str(len(j["files"])),
        )
    return table


def _request_table(req: dict[str, Any]) -> Table:
    if req.get("kind") == "command" or req.get("progress") is None:
        return _command_table(req)
    p = req["progress"]
    said = f"{_events(p)} events" if p["events_total"] else "a command, no events"
    table = Table(
        "job",
        "state",
        "node",
        "events",
        "packets",
        "files",
        title=f"{req['id']} ({req['owner']}) {req['state']}: {said}, {p['packets']} packets, "
        f"{p['bytes']} bytes",
    )
    for j in req["jobs"]:
        jp = j["progress"]
        table.add_row(
            j["id"],
            j["state"],
            j["node"] or "",
            _events(jp),
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


RESULT_WAIT_S = 120.0
"""How long ``datasched result`` waits for a result the server is still merging."""

TrustOpt = Annotated[
    bool,
    typer.Option(
        "--trust",
        help="Load the result even if it holds classes off datasched's list of what results "
        "may hold: that runs code from the result. Only for your own results.",
    ),
]


@app.command("result")
def result(
    request_id: Annotated[str, typer.Argument(help="A completed request.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to write result.pkl in.")],
    trust: TrustOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Write a completed request's merged result to DIR/result.pkl, as the server serves it,
    then load it with datasched.safepickle and print what it holds. A result holding classes
    off its list (the user's own) stays written but is not loaded: exit 1, unless --trust.
    From a server that does not merge the result, the packets are merged here, through the
    same loader (docs/service.md, "Results and user code")."""
    from datasched import safepickle
    from datasched._files import atomic_write_bytes

    check_out_dir(out_dir)
    path = out_dir / "result.pkl"
    with ApiClient(server, token) as client:
        data, refusal = _fetch_result(client, request_id)
        if data is None:
            merged = _merge_packets(client, request_id, refusal, trust)
    if data is None:
        from datasched.runtime.outputs import write_output

        write_output(merged, path)
        out.print(str(path), highlight=False, soft_wrap=True)
        _print_summary(merged)
        return
    atomic_write_bytes(path, data, fsync=True)
    out.print(str(path), highlight=False, soft_wrap=True)
    try:
        loaded = safepickle.loads(data, trust=trust)
    except safepickle.Refused as exc:
        fail(f"result: {path} written, not loaded: {exc.reason}; {TRUST_ADVICE}", code=1)
    except Exception as exc:  # a pickle broken or refused by its own library
        fail(f"result: {path} written, but it does not load: {_one_line(exc)}", code=1)
    _print_summary(loaded)


TRUST_ADVICE = "--trust loads it, running its code: only for your own results"


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


def _fetch_result(client: ApiClient, request_id: str) -> tuple[bytes | None, Any]:
    """The merged result's bytes; or ``(None, response)`` when the server answers that it
    does not merge this result (409 on ``result`` with no ``Retry-After``): the caller then
    merges the packets. A result being merged is waited for, up to RESULT_WAIT_S."""
    deadline = time.monotonic() + RESULT_WAIT_S
    while True:
        r = client.request("GET", f"/requests/{request_id}/result")
        if r.status_code == 200:
            return r.content, None
        if r.status_code == 409 and _is_json(r) and _first_field(r) == "result":
            retry = r.headers.get("Retry-After")
            if retry is None:
                return None, r
            if time.monotonic() < deadline:
                time.sleep(min(max(float(retry), 0.1), 5.0))
                continue
        client.refused(r)


def _first_field(r: Any) -> Any:
    errors = r.json().get("errors") or [{}]
    return errors[0].get("field")


def _merge_packets(client: ApiClient, request_id: str, refusal: Any, trust: bool) -> Any:
    """The merge of the request's packets' results, each loaded with datasched.safepickle
    (plain pickle with ``trust``); exits 1 naming what it refuses."""
    from datasched import safepickle
    from datasched.runtime.outputs import merge_all

    r = client.call("GET", f"/requests/{request_id}/result", params={"packets": "true"})
    try:
        blobs = safepickle.loads(r.content)  # a list of bytes: loads nothing of the user's
    except Exception as exc:
        fail(f"result: the server's packets do not load: {_one_line(exc)}", code=1)
    if not (isinstance(blobs, list) and all(isinstance(b, bytes) for b in blobs)):
        fail("result: the server's packets are not a list of bytes", code=1)
    if not blobs:
        client.refused(refusal)
    try:
        return merge_all(safepickle.loads(b, trust=trust) for b in blobs)
    except safepickle.Refused as exc:
        fail(f"result: not merged here, nothing written: {exc.reason}; {TRUST_ADVICE}", code=1)
    except Exception as exc:
        server_said = refusal.json()["errors"][0].get("reason")
        fail(f"result: {server_said}; merged here: {_one_line(exc)}", code=1)


def _print_summary(value: Any) -> None:
    for line in describe_result(value):
        out.print(line, markup=False, highlight=False, soft_wrap=True)


def describe_result(value: Any, limit: int = 40) -> list[str]:
    """What a result holds, a line each: a mapping's top-level keys and the type of each
    (``mass: hist.Hist (1 axis, 60 bins)``), or ``result: TYPE`` for anything else."""
    from collections.abc import Mapping

    if not isinstance(value, Mapping):
        return [f"result: {_describe(value)}"]
    lines = [f"{key}: {_describe(v)}" for key, v in list(value.items())[:limit]]
    if len(value) > limit:
        lines.append(f"... and {len(value) - limit} more keys")
    return lines or ["result: an empty mapping"]


def _type_name(cls: type) -> str:
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    top = "coffea.processor" if module.startswith("coffea.processor") else module.split(".")[0]
    return f"{top}.{cls.__qualname__}"


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


def _describe(v: Any) -> str:
    from collections.abc import Mapping, Sized

    name = _type_name(type(v))
    if v is None:
        return "None"
    if hasattr(v, "axes") and hasattr(v, "storage_type"):  # hist / boost-histogram
        bins = 1
        for axis in v.axes:
            bins *= len(axis)
        return f"{name} ({_plural(len(v.axes), 'axis', 'axes')}, {_plural(bins, 'bin')})"
    if hasattr(v, "shape") and hasattr(v, "dtype") and hasattr(v, "ndim") and v.ndim:
        return f"{name} (shape {tuple(v.shape)}, {v.dtype})"
    if type(v).__module__.startswith("awkward"):
        return f"{name} ({' '.join(str(getattr(v, 'type', '')).split())[:80]})"
    if isinstance(v, bool | int | float | complex | str | bytes) or hasattr(v, "dtype"):
        return f"{name} {v!r:.60}"
    if isinstance(v, Mapping):
        return f"{name} ({_plural(len(v), 'key')})"
    if isinstance(v, Sized):
        return f"{name} ({_plural(len(v), 'item')})"
    return name
