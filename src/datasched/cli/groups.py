"""``datasched groups list`` and ``groups set G --priority P --quota Q`` against a running
service: the groups behind fair-share admission. Setting is for administrators."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from datasched.cli.app import app
from datasched.cli.client import ApiClient, ServerOpt, TokenOpt
from datasched.cli.common import fail, out

__all__ = ["groups_app"]

groups_app = typer.Typer(
    help="Groups of users: priority and quota behind the service's fair share.",
    no_args_is_help=True,
)
app.add_typer(groups_app, name="groups")


def _share(value: Any) -> str:
    return "—" if value is None else f"{100 * float(value):.0f}%"


def _table(rows: list[dict[str, Any]]) -> Table:
    # A light frame and numbers flush right: eight columns and a group's full name fit in 80
    # columns; a name too long for the rest of the line wraps rather than being cut.
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, padding=(0, 1))
    table.add_column("group", overflow="fold", min_width=8)
    for head in ("prio", "quota", "users", "wait", "run", "target", "achieved"):
        table.add_column(head, justify="right", no_wrap=True)
    for g in rows:
        table.add_row(
            g["name"],
            f"{g['priority']:g}",
            f"{g['quota']:g}",
            str(g["users"]),
            str(g["waiting"]),
            str(g["running"]),
            _share(g["target_share"]) if g["waiting"] or g["running"] else "—",
            _share(g["achieved_share"]),
        )
    return table


@groups_app.command("list")
def groups_list(server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The groups: priority (prio), quota, users, jobs waiting (wait) and running (run), the
    target share (quota x priority over the groups with work) and the share of the recent
    CPU achieved."""
    with ApiClient(server, token) as client:
        rows = client.call("GET", "/groups").json()["groups"]
    out.print(_table(rows))


@groups_app.command("set")
def groups_set(
    group: Annotated[str, typer.Argument(help="The group (made if new).")],
    priority: Annotated[
        float | None, typer.Option(help="Its priority: a weight, > 0 (default 1).")
    ] = None,
    quota: Annotated[
        float | None,
        typer.Option(help="Its quota: a target share relative to the others', > 0 (default 1)."),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Set a group's priority and/or quota (administrators only)."""
    if group in (".", "..") or "/" in group or not group:
        fail(f"GROUP: {group!r} is not a group's name")
    if priority is None and quota is None:
        fail("--priority, --quota: give one or both")
    for name, value in (("--priority", priority), ("--quota", quota)):
        if value is not None and not 0 < value < math.inf:
            fail(f"{name}: expected a finite number > 0, got {value}")
    body = {k: v for k, v in (("priority", priority), ("quota", quota)) if v is not None}
    with ApiClient(server, token) as client:
        row = client.call("PUT", f"/groups/{group}", json=body).json()
    out.print(_table([row]))
