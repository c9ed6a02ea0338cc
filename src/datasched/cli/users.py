"""``datasched users``: the service's users, administered on the daemon's store (``--db``):
add one (or give it a new token), move it or make it an administrator, remove it, list them.
Each change holds from the caller's next API call (the daemon reads the caller from the
store on every call)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from datasched.cli.common import err, fail, out
from datasched.cli.serve import DbOpt, open_store, users_app

__all__: list[str] = []


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The user's name.")],
    group: Annotated[
        str | None,
        typer.Option(
            help="The user's group (made if new): needed for a new user. With --new-token, "
            "the user keeps their group unless this names another.",
            show_default=False,
        ),
    ] = None,
    admin: Annotated[
        bool, typer.Option("--admin", help="May see and cancel all requests.")
    ] = False,
    new_token: Annotated[
        bool, typer.Option("--new-token", help="Replace an existing user's token.")
    ] = False,
    priority: Annotated[
        float | None, typer.Option(help="The group's priority (PROOF §3's group priorities).")
    ] = None,
    db: DbOpt = None,
) -> None:
    """Add a user (or give one a new token) and print the token: it is shown only now. A
    user given a new token keeps their group, unless --group names another: then a line on
    stderr says which group they left."""
    from datasched.service.users import UserError, issue_token

    store = open_store(db)
    try:
        with store.session() as s:
            issued = issue_token(
                s, name, group, admin=admin, new_token=new_token, group_priority=priority
            )
    except UserError as exc:
        fail(str(exc))
    finally:
        store.close()
    out.print(issued.token, highlight=False, soft_wrap=True)
    # What else is said goes to stderr: stdout is the token alone, for scripts.
    if issued.restored:
        err.print(f"{name}: brought back (they had been removed)", highlight=False)
    if issued.moved_from is not None:
        err.print(
            f"{name}: moved from group {issued.moved_from!r} to {issued.group!r}",
            highlight=False,
            soft_wrap=True,
        )


@users_app.command("set")
def users_set(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The user's name.")],
    admin: Annotated[
        bool | None,
        typer.Option(
            "--admin/--no-admin",
            help="Make the user an administrator, or no longer one (never the last).",
            show_default=False,
        ),
    ] = None,
    group: Annotated[
        str | None, typer.Option(help="Move the user to this group (made if new).")
    ] = None,
    db: DbOpt = None,
) -> None:
    """Promote or demote an administrator, or move a user to another group; their token
    stays as it is. The last administrator is never demoted."""
    from datasched.service.users import UserError, set_user

    store = open_store(db)
    try:
        with store.session() as s:
            change = set_user(s, name, admin=admin, group=group)
    except UserError as exc:
        fail(str(exc))
    finally:
        store.close()
    said = []
    if change.group != change.was_group:
        said.append(f"moved from group {change.was_group!r} to {change.group!r}")
    if change.admin != change.was_admin:
        said.append("now an administrator" if change.admin else "no longer an administrator")
    state = f"group {change.group!r}, " + ("administrator" if change.admin else "not administrator")
    out.print(
        f"{name}: {'; '.join(said) or 'unchanged'} ({state})", highlight=False, soft_wrap=True
    )


@users_app.command("remove")
def users_remove(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The user's name.")],
    cancel: Annotated[
        bool,
        typer.Option(
            "--cancel",
            help="Cancel every request of theirs not yet final, in the same step (their "
            "running jobs stopped by the daemon).",
        ),
    ] = False,
    db: DbOpt = None,
) -> None:
    """Remove a user: their token stops working at once; their requests are kept, under their
    name (which no one else may take; --new-token brings them back). Refused while one of
    their requests is not yet final, unless --cancel: then, in one transaction, their token
    is revoked, each such request cancelled and the user removed (the daemon stops their
    running jobs at its next round). Refused for the last administrator."""
    from datasched.service.store.ops import remove_user_cancelling
    from datasched.service.users import UserError, remove_user

    store = open_store(db)
    cancelled: tuple[str, ...] = ()
    try:
        with store.session() as s:
            if cancel:
                removal = remove_user_cancelling(s, name)
                gone, cancelled = removal.removed, removal.cancelled
            else:
                gone = remove_user(s, name)
    except UserError as exc:
        fail(str(exc))
    finally:
        store.close()
    said = f"{name}: removed; their token no longer works; "
    if cancel:
        n = len(cancelled)
        said += f"{n} request{'' if n == 1 else 's'} cancelled"
        said += f" ({', '.join(cancelled)}); " if cancelled else "; "
    said += f"{gone.requests} request{'' if gone.requests == 1 else 's'} kept"
    out.print(said, highlight=False, soft_wrap=True)


def _names_table(*figures: str) -> Any:
    """A table of users and groups that fits 80 columns: a light frame, the figures whole,
    a name too long for the line wrapped rather than cut."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for head in ("user", "group"):
        table.add_column(head, overflow="fold")
    for head in figures:
        table.add_column(head, no_wrap=True)
    return table


@users_app.command("list")
def users_list(
    removed: Annotated[
        bool, typer.Option("--removed", help="List the removed users instead.")
    ] = False,
    db: DbOpt = None,
) -> None:
    """List the users: name, group, group priority, administrator or not. With --removed,
    the removed users: name, last group, when removed, the requests kept."""
    from datasched.service.users import list_users, removed_users

    store = open_store(db)
    with store.session() as s:
        users = list_users(s)
        gone = removed_users(s) if removed else []
    store.close()
    if removed:
        table = _names_table("removed", "requests")
        for r in gone:
            table.add_row(r.name, r.group, f"{r.removed:%Y-%m-%d %H:%M}", str(r.requests))
        out.print(table)
        return
    table = _names_table("priority", "admin")
    for u in users:
        table.add_row(u.name, u.group, f"{u.priority:g}", "yes" if u.admin else "")
    out.print(table)
