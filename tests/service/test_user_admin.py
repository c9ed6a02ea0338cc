"""Administering users: a new token keeps the user's group unless another is named, a user
is moved or demoted with ``users set`` (never the last administrator), and ``users remove``
revokes a token at once, keeping the name of a user with past requests."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from datasched.cli import app
from datasched.service.store.db import Store
from datasched.service.store.models import Request
from datasched.service.users import (
    UserError,
    add_user,
    authenticate,
    list_accounts,
    remove_user,
    set_user,
)

cli = CliRunner()


def _request(store: Store, owner: str, rid: str, state: str) -> None:
    with store.session() as s:
        owner_id = next(c.id for c, _ in list_accounts(s) if c.name == owner)
        s.add(Request(id=rid, owner_id=owner_id, state=state, raw="x", content_type="t"))


def test_a_new_token_keeps_the_group_unless_another_is_named(sqlite_store: Store) -> None:
    with sqlite_store.session() as s:
        add_user(s, "ann", "physics")
        token = add_user(s, "ann", None, new_token=True)
        assert authenticate(s, token).group == "physics"  # type: ignore[union-attr]
        token = add_user(s, "ann", "heavy-ion", new_token=True)
        assert authenticate(s, token).group == "heavy-ion"  # type: ignore[union-attr]
        with pytest.raises(UserError, match="--group: user 'bob' is new and needs a group"):
            add_user(s, "bob", None)


def test_the_last_administrator_is_never_demoted_or_removed(sqlite_store: Store) -> None:
    with sqlite_store.session() as s:
        add_user(s, "root", "admins", admin=True)
        add_user(s, "ann", "physics")
        with pytest.raises(UserError, match="--no-admin: 'root' is the last administrator"):
            set_user(s, "root", admin=False)
        with pytest.raises(UserError, match="NAME: 'root' is the last administrator"):
            remove_user(s, "root")
        assert set_user(s, "ann", admin=True).admin
        assert not set_user(s, "root", admin=False).admin  # another administrator is left
        with pytest.raises(UserError, match="NAME: no user 'nobody'"):
            set_user(s, "nobody", group="x")
        with pytest.raises(UserError, match="give one or both"):
            set_user(s, "ann")


def test_removing_a_user_stops_its_token_and_keeps_its_history(sqlite_store: Store) -> None:
    with sqlite_store.session() as s:
        ann = add_user(s, "ann", "physics")
        bob = add_user(s, "bob", "physics")
    _request(sqlite_store, "ann", "r1", "running")
    _request(sqlite_store, "ann", "r0", "completed")
    with sqlite_store.session() as s, pytest.raises(UserError, match=r"open \(r1\); cancel"):
        remove_user(s, "ann")
    with sqlite_store.session() as s:
        s.get(Request, "r1").state = "aborted"  # type: ignore[union-attr]
    with sqlite_store.session() as s:
        assert remove_user(s, "ann") == "revoked"
        assert remove_user(s, "bob") == "deleted"
    with sqlite_store.session() as s:
        assert authenticate(s, ann) is None
        assert authenticate(s, bob) is None
        assert [(c.name, ok) for c, ok in list_accounts(s)] == [("ann", False)]
        assert s.get(Request, "r0") is not None  # the history stays
        # the name is not free for another: ann gets a token again only on purpose
        with pytest.raises(UserError, match="exists"):
            add_user(s, "ann", "other")
        again = add_user(s, "ann", None, new_token=True)
        assert authenticate(s, again).name == "ann"  # type: ignore[union-attr]


def test_the_users_commands(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    assert (
        cli.invoke(
            app, ["users", "add", "root", "--group", "admins", "--admin", "--db", db]
        ).exit_code
        == 0
    )
    r = cli.invoke(app, ["users", "add", "ann", "--group", "physics", "--db", db])
    assert r.exit_code == 0, r.output
    r = cli.invoke(app, ["users", "add", "ann", "--new-token", "--db", db])
    assert r.exit_code == 0, r.output
    assert "moved" not in r.stderr
    r = cli.invoke(app, ["users", "add", "ann", "--new-token", "--group", "cms", "--db", db])
    assert r.exit_code == 0, r.output
    assert "ann: moved from group 'physics' to 'cms'" in r.stderr
    r = cli.invoke(app, ["users", "add", "bob", "--db", db])
    assert r.exit_code == 2
    assert "error: --group: user 'bob' is new and needs a group" in r.stderr
    r = cli.invoke(app, ["users", "set", "root", "--no-admin", "--db", db])
    assert r.exit_code == 2
    assert "error: --no-admin: 'root' is the last administrator" in r.stderr
    r = cli.invoke(app, ["users", "set", "ann", "--admin", "--group", "physics", "--db", db])
    assert r.exit_code == 0, r.output
    assert "ann: group physics, administrator" in r.stdout
    r = cli.invoke(app, ["users", "remove", "root", "--db", db])
    assert r.exit_code == 0, r.output
    assert "root: removed" in r.stdout
    r = cli.invoke(app, ["users", "remove", "ghost", "--db", db])
    assert r.exit_code == 2
    assert "error: NAME: no user 'ghost'" in r.stderr
    r = cli.invoke(app, ["users", "list", "--db", db])
    assert "root" not in r.stdout
    assert "ann" in r.stdout
