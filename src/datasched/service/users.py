"""Users, groups and their tokens.

A token is ``ds_<id>_<secret>``: ``id`` is 8 random bytes kept in clear to find the user,
``secret`` 32 random bytes (256 bits) from :mod:`secrets`. The store keeps only
``sha256(salt + secret)`` with a per-user random salt, compared in constant time. A fast
hash is enough here, unlike for passwords: a slow one (scrypt, bcrypt) exists to make
guessing a low-entropy password expensive, and no amount of guessing finds a 256-bit random
secret; a fast hash also keeps checking a token on every API call cheap. The token is shown
once, when made; a lost token is replaced (``users add NAME --new-token``), never recovered.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from datasched.service.store.models import Group, User

__all__ = [
    "Caller",
    "GroupInfo",
    "Issued",
    "UserError",
    "add_user",
    "authenticate",
    "issue_token",
    "list_groups",
    "list_users",
    "set_group",
]

NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


class UserError(ValueError):
    """A user or group that cannot be made; the message names the field and the reason."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls the API: the user's name, id, group and whether an administrator."""

    id: int
    name: str
    group: str
    admin: bool
    priority: float = 1.0


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256((salt + secret).encode()).hexdigest()


def _new_token() -> tuple[str, str, str, str]:
    """A new token and what the store keeps of it: ``(token, id, salt, hash)``."""
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    return f"ds_{token_id}_{secret}", token_id, salt, _digest(salt, secret)


@dataclass(frozen=True, slots=True)
class Issued:
    """A token made (:func:`issue_token`): the token, shown once; the user's group; and the
    group the user was moved from (None: a new user, or one who kept their group)."""

    token: str
    group: str
    moved_from: str | None = None


def _check_name(field: str, value: str) -> None:
    if not NAME.match(value):
        raise UserError(
            f"{field}: {value!r} is not a name (letters, digits, '_', '.', '-'; at most 64)"
        )


def _group(s: Session, name: str, priority: float | None) -> Group:
    """Group ``name``, made if new (its priority ``priority`` or 1, its quota 1); an existing
    one's priority set to ``priority`` when given."""
    g = s.scalar(select(Group).where(Group.name == name))
    if g is None:
        g = Group(name=name, priority=priority or 1.0, quota=1.0)
        s.add(g)
        s.flush()
    elif priority is not None:
        g.priority = priority
    return g


def issue_token(
    s: Session,
    name: str,
    group: str | None = None,
    *,
    admin: bool = False,
    new_token: bool = False,
    group_priority: float | None = None,
) -> Issued:
    """Make user ``name`` in ``group`` (made too if new; needed for a new user) with a new
    token. With ``new_token`` an existing user gets a new token instead (the old one stops
    working) and keeps their group unless ``group`` names another (then ``moved_from``
    says which they left); ``admin`` makes them an administrator, and never takes it
    away."""
    _check_name("NAME", name)
    if group is not None:
        _check_name("--group", group)
    if group_priority is not None and not 0 < group_priority < math.inf:
        raise UserError(f"--priority: expected a finite number > 0, got {group_priority}")
    user = s.scalar(select(User).where(User.name == name))
    moved_from = None
    if user is None:
        if group is None:
            raise UserError(f"--group: needed to add a new user ({name!r} does not exist)")
        g = _group(s, group, group_priority)
        user = User(name=name, group=g, admin=admin)
        s.add(user)
    elif not new_token:
        raise UserError(f"NAME: user {name!r} exists (give --new-token to replace its token)")
    else:
        g = _group(s, user.group.name if group is None else group, group_priority)
        if user.group_id != g.id:
            moved_from = user.group.name
        user.group = g
        user.admin = admin or user.admin
    token, token_id, salt, digest = _new_token()
    user.token_id, user.token_salt, user.token_hash = token_id, salt, digest
    s.flush()
    return Issued(token, g.name, moved_from)


def add_user(
    s: Session,
    name: str,
    group: str | None = None,
    *,
    admin: bool = False,
    new_token: bool = False,
    group_priority: float | None = None,
) -> str:
    """The token of :func:`issue_token`: user ``name`` made in ``group``, or with
    ``new_token`` an existing user's new token (their group kept unless one is named)."""
    return issue_token(
        s, name, group, admin=admin, new_token=new_token, group_priority=group_priority
    ).token


def list_users(s: Session) -> list[Caller]:
    """Every user, by name."""
    return [
        Caller(u.id, u.name, u.group.name, u.admin, u.group.priority)
        for u in s.scalars(select(User).order_by(User.name))
    ]


def authenticate(s: Session, token: str) -> Caller | None:
    """The user whose token this is, or None."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != "ds":
        return None
    user = s.scalar(select(User).where(User.token_id == parts[1]))
    if user is None:
        return None
    if not hmac.compare_digest(_digest(user.token_salt, parts[2]), user.token_hash):
        return None
    return Caller(user.id, user.name, user.group.name, user.admin, user.group.priority)


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A group: its priority, its quota (a relative target share) and its users."""

    name: str
    priority: float
    quota: float
    users: int


def _positive(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{field}: expected a number > 0, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{field}: expected a number > 0, got {value!r}")
    return float(value)


def set_group(
    s: Session, name: str, *, priority: float | None = None, quota: float | None = None
) -> GroupInfo:
    """Set a group's priority and/or quota (the group is made if new, at 1 and 1). Both
    must be finite and > 0: a group of weight 0 could wait forever."""
    if not NAME.match(name):
        raise UserError(f"group: {name!r} is not a name (letters, digits, '_', '.', '-')")
    new_priority = _positive("priority", priority) if priority is not None else None
    new_quota = _positive("quota", quota) if quota is not None else None
    g = s.scalar(select(Group).where(Group.name == name))
    if g is None:
        g = Group(name=name, priority=1.0, quota=1.0)
        s.add(g)
    if new_priority is not None:
        g.priority = new_priority
    if new_quota is not None:
        g.quota = new_quota
    s.flush()
    return _info(s, g)


def _info(s: Session, g: Group) -> GroupInfo:
    n = s.scalar(select(func.count()).select_from(User).where(User.group_id == g.id)) or 0
    return GroupInfo(g.name, float(g.priority), float(g.quota), int(n))


def list_groups(s: Session) -> list[GroupInfo]:
    """Every group, by name."""
    return [_info(s, g) for g in s.scalars(select(Group).order_by(Group.name))]
