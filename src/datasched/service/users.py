"""Users, groups and their tokens.

A token is ``ds_<id>_<secret>``: ``id`` is 8 random bytes kept in clear to find the user,
``secret`` 32 random bytes (256 bits) from :mod:`secrets`. The store keeps only
``sha256(salt + secret)`` with a per-user random salt, compared in constant time. A fast
hash is enough here, unlike for passwords: a slow one (scrypt, bcrypt) exists to make
guessing a low-entropy password expensive, and no amount of guessing finds a 256-bit random
secret; a fast hash also keeps checking a token on every API call cheap. The token is shown
once, when made; a lost token is replaced (``users add NAME --new-token``), never recovered.

A user is removed (:func:`remove_user`) only once none of their requests is still open, or
(``users remove NAME --cancel``, :func:`datasched.service.store.ops.remove_user_cancelling`)
with their open requests cancelled in the same transaction: the daemon stops the runner's
jobs of requests aborted in its store, whoever aborted them. The row stays, marked removed,
so that the requests keep their owner's name (history, results, the groups' past usage); no
token is theirs any more, and their name is not given to anyone else (``--new-token``
brings the same user back). Neither removing nor demoting (:func:`set_user`) leaves the
store without an administrator.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from datasched.service.contracts import JobState
from datasched.service.store.models import Group, Request, User, utcnow

__all__ = [
    "Caller",
    "GroupInfo",
    "Issued",
    "Removed",
    "UserChange",
    "UserError",
    "add_user",
    "authenticate",
    "issue_token",
    "list_groups",
    "list_users",
    "mark_removed",
    "removable_user",
    "remove_user",
    "removed_users",
    "revoke_token",
    "set_group",
    "set_user",
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
    """A token made (:func:`issue_token`): the token, shown once; the user's group; the group
    the user was moved from (None: a new user, or one who kept their group)."""

    token: str
    group: str
    moved_from: str | None = None
    restored: bool = False
    """A removed user brought back (``new_token``)."""


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
    says which they left); a removed user is brought back this way (``restored``), not an
    administrator unless ``admin``. ``admin`` makes the user an administrator, and never
    takes it away (:func:`set_user` does)."""
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
    elif not new_token and user.removed is not None:
        raise UserError(
            f"NAME: user {name!r} was removed (their requests keep the name); give "
            "--new-token to bring them back, or choose another name"
        )
    elif not new_token:
        raise UserError(f"NAME: user {name!r} exists (give --new-token to replace its token)")
    else:
        g = _group(s, user.group.name if group is None else group, group_priority)
        if user.group_id != g.id:
            moved_from = user.group.name
        user.group = g
        user.admin = admin or user.admin
    restored = user.removed is not None
    user.removed = None
    token, token_id, salt, digest = _new_token()
    user.token_id, user.token_salt, user.token_hash = token_id, salt, digest
    s.flush()
    return Issued(token, g.name, moved_from, restored)


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
    """Every user not removed, by name."""
    return [
        Caller(u.id, u.name, u.group.name, u.admin, u.group.priority)
        for u in s.scalars(select(User).where(User.removed.is_(None)).order_by(User.name))
    ]


OPEN_STATES = tuple(st.value for st in JobState if not st.final)
"""A request's states while it may still run: a user who has one is not removed."""


@dataclass(frozen=True, slots=True)
class Removed:
    """A removed user: their name and last group, when they were removed, and how many of
    their requests the store keeps (none of them open)."""

    name: str
    group: str
    removed: datetime
    requests: int


@dataclass(frozen=True, slots=True)
class UserChange:
    """A user after :func:`set_user`: their group and whether an administrator, with what
    they were before."""

    name: str
    group: str
    admin: bool
    was_group: str
    was_admin: bool


def _lock_admins(s: Session) -> list[int]:
    """The administrators' ids (not removed), their rows locked until the transaction ends
    (PostgreSQL's ``FOR UPDATE``, taken in id order so that two such transactions never
    wait on each other; SQLite's transactions hold the write lock already): two
    administrators demoting each other at once cannot leave none."""
    q = select(User.id).where(User.admin.is_(True), User.removed.is_(None))
    return list(s.scalars(q.order_by(User.id).with_for_update()))


def _user(s: Session, name: str) -> User:
    """User ``name``, read afresh and locked until the transaction ends; one line naming
    the user when there is none."""
    q = select(User).where(User.name == name).with_for_update(of=User)
    user = s.scalars(q.execution_options(populate_existing=True)).one_or_none()
    if user is None:
        raise UserError(f"NAME: no user {name!r}")
    return user


def _last_admin(field: str, user: User, admins: list[int]) -> None:
    if user.admin and admins == [user.id]:
        raise UserError(
            f"{field}: {user.name!r} is the last administrator; make another one first "
            "(datasched users set NAME --admin)"
        )


def removable_user(s: Session, name: str) -> User:
    """User ``name``, locked for their removal (after the administrators' rows, in that
    order): one line naming the field for an unknown or removed user and for the last
    administrator."""
    admins = _lock_admins(s)
    user = _user(s, name)
    if user.removed is not None:
        raise UserError(f"NAME: user {name!r} was removed already")
    _last_admin("NAME", user, admins)
    return user


def revoke_token(user: User) -> None:
    """No token is the user's any more: a fresh id nobody was given, and a hash no secret
    has (the daemon reads the caller from the store on every call: refused at the next)."""
    user.token_id, user.token_salt, user.token_hash = secrets.token_hex(8), "", ""


def mark_removed(s: Session, user: User) -> Removed:
    """Mark ``user`` (from :func:`removable_user`, none of their requests open) removed:
    their token revoked, no longer an administrator, their requests kept."""
    mine = select(Request.id).where(Request.owner_id == user.id)
    kept = s.scalar(select(func.count()).select_from(mine.subquery())) or 0
    user.removed = utcnow()
    user.admin = False
    revoke_token(user)
    s.flush()
    return Removed(user.name, user.group.name, user.removed, int(kept))


def remove_user(s: Session, name: str) -> Removed:
    """Remove user ``name``: their token stops working at once, their requests stay (with
    their results) under their name, which no one else may take. Refused, changing nothing,
    for a user with requests still open (cancel them first, or remove them with
    :func:`datasched.service.store.ops.remove_user_cancelling`, which cancels them in the
    same transaction), an unknown or removed user, and the last administrator."""
    user = removable_user(s, name)
    mine = select(Request.id).where(Request.owner_id == user.id)
    still = list(s.scalars(mine.where(Request.state.in_(OPEN_STATES)).order_by(Request.created)))
    if still:
        shown = ", ".join(still[:3]) + (f" and {len(still) - 3} more" if len(still) > 3 else "")
        some = f"{len(still)} requests" if len(still) > 1 else "a request"
        raise UserError(
            f"NAME: user {name!r} has {some} not yet final ({shown}); cancel "
            f"{'them' if len(still) > 1 else 'it'} first (datasched cancel ID, with an "
            "administrator's token), or give --cancel"
        )
    return mark_removed(s, user)


def removed_users(s: Session) -> list[Removed]:
    """Every removed user, by name, with the requests the store keeps of each."""
    kept = select(Request.owner_id, func.count().label("n")).group_by(Request.owner_id).subquery()
    q = (
        select(User, kept.c.n)
        .outerjoin(kept, kept.c.owner_id == User.id)
        .where(User.removed.is_not(None))
        .order_by(User.name)
    )
    return [Removed(u.name, u.group.name, u.removed, int(n or 0)) for u, n in s.execute(q).all()]


def set_user(
    s: Session, name: str, *, admin: bool | None = None, group: str | None = None
) -> UserChange:
    """Make user ``name`` an administrator or not (``admin``) and/or move them to ``group``
    (made if new, at priority and quota 1). Their token stays as it is. Refused, changing
    nothing, for an unknown or removed user and for demoting the last administrator."""
    if admin is None and group is None:
        raise UserError("--admin, --no-admin, --group: give one")
    if group is not None:
        _check_name("--group", group)
    admins = _lock_admins(s)
    user = _user(s, name)
    if user.removed is not None:
        raise UserError(
            f"NAME: user {name!r} was removed (users add {name} --new-token brings them back)"
        )
    if admin is False:
        _last_admin("--no-admin", user, admins)
    was_group, was_admin = user.group.name, user.admin
    if admin is not None:
        user.admin = admin
    if group is not None:
        user.group = _group(s, group, None)
    s.flush()
    return UserChange(user.name, user.group.name, user.admin, was_group, was_admin)


def authenticate(s: Session, token: str) -> Caller | None:
    """The user whose token this is, or None (a removed user has none)."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != "ds":
        return None
    user = s.scalar(select(User).where(User.token_id == parts[1]))
    if user is None or user.removed is not None:
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
    users = select(func.count()).select_from(User).where(User.removed.is_(None))
    n = s.scalar(users.where(User.group_id == g.id)) or 0
    return GroupInfo(g.name, float(g.priority), float(g.quota), int(n))


def list_groups(s: Session) -> list[GroupInfo]:
    """Every group, by name."""
    return [_info(s, g) for g in s.scalars(select(Group).order_by(Group.name))]
