"""Paths of a request, confined to the configured roots: resolved (``..`` and symbolic links
followed) before they are compared, so that neither leads out of the roots."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from datasched.service.request.fields import strip_file_scheme

__all__ = [
    "Outside",
    "confine",
    "confine_output",
    "expand",
    "is_remote",
    "locate",
    "readable_for",
    "resolve_roots",
    "writable_problem",
]


class Outside(ValueError):
    """A path that cannot be used: outside the roots, or no roots configured."""


def is_remote(url: str) -> bool:
    """A URL with a scheme other than ``file`` (``root://``, ``s3://``)."""
    return "://" in url and not url.startswith("file://")


def confine(path: str, roots: Sequence[Path]) -> Path:
    """``path`` (absolute, or relative to the first root) resolved, if it lies under one of
    the ``roots`` (themselves resolved: :func:`resolve_roots`); :class:`Outside` naming the
    reason otherwise."""
    if not roots:
        raise Outside("no storage roots are configured, so no local path is allowed")
    raw = strip_file_scheme(path)
    full = raw if os.path.isabs(raw) else os.path.join(roots[0], raw)
    try:
        resolved = os.path.realpath(full, strict=False)
    except (OSError, ValueError) as exc:  # a loop of links, a NUL byte
        raise Outside(f"cannot be resolved: {exc}") from exc
    for root in roots:
        top = str(root)
        if resolved == top or resolved.startswith(top.rstrip(os.sep) + os.sep):
            return Path(resolved)
    where = ", ".join(str(r) for r in roots)
    raise Outside(f"{resolved} is outside the configured roots ({where})")


def resolve_roots(roots: Sequence[Path | str]) -> list[Path]:
    """The roots as :func:`confine` compares with them: absolute, links resolved."""
    return [Path(os.path.realpath(r)) for r in roots]


def expand(pattern: str, roots: Sequence[Path], *, limit: int) -> list[Path]:
    """The files a wildcard path matches, sorted, each confined to the roots (a match that
    is a link out of them raises :class:`Outside`); at most ``limit`` of them."""
    raw = Path(strip_file_scheme(pattern))
    if not roots:
        raise Outside("no storage roots are configured, so no local path is allowed")
    full = raw if raw.is_absolute() else roots[0] / raw
    # The part before the first wildcard must itself be under a root (no '..' out of it).
    parts = full.parts
    fixed = next((i for i, p in enumerate(parts) if glob.has_magic(p)), len(parts))
    confine(str(Path(*parts[:fixed])), roots)
    matches: list[Path] = []
    for match in sorted(glob.iglob(str(full))):
        path = Path(match)
        if not path.is_file():
            continue
        matches.append(confine(match, roots))
        if len(matches) > limit:
            raise Outside(f"matches more than {limit} files")
    return matches


def writable_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written (None: it can): an existing file must be writable,
    a new one's nearest existing directory too."""
    if path.exists():
        if path.is_dir():
            return f"{path} is a directory"
        return None if os.access(path, os.W_OK) else f"{path} is not writable"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"{parent} is not writable"


def locate(target: str, roots: Sequence[Path]) -> Path:
    """The file ``target`` names: an absolute path under a root, or a relative one under
    the first root holding it; :class:`Outside` naming the reason otherwise."""
    if os.path.isabs(strip_file_scheme(target)) or not roots:
        candidates = [target]
    else:
        candidates = [os.path.join(r, strip_file_scheme(target)) for r in roots]
    for candidate in candidates:
        path = confine(candidate, roots)
        if path.is_file():
            return path
    raise Outside(f"no file {target} under the configured roots")


def confine_output(path: str, roots: Sequence[Path], user: str | None) -> Path:
    """``path`` resolved, where a job of ``user`` may write: under a root, and, when
    ``user`` is given (a daemon of several users), in that user's own directory of it
    (``<root>/<user>/...``), so that no user's job writes over another's outputs;
    :class:`Outside` naming the reason otherwise."""
    if user is not None and ("/" in user or user in ("", ".", "..")):
        raise Outside(f"user {user!r} has no directory of their own")
    resolved = confine(path, roots)
    if user is None:
        return resolved
    for root in roots:
        own = Path(root) / user
        if resolved == own or resolved.is_relative_to(own):
            if resolved == own:
                break
            return resolved
    mine = " or ".join(f"{Path(r) / user}/" for r in roots)
    raise Outside(f"{resolved}: outputs go under your own directory ({mine})")


def readable_for(path: Path, roots: Sequence[Path], user: str | None) -> Path:
    """``path`` (resolved, under a root) if a job of ``user`` may read it: anything when
    ``user`` is None (a daemon of one user); in a daemon of several users, what is in the
    user's own directory (``<root>/<user>/...``) or readable by everyone (the file readable by
    others, each directory between it and its root searchable by others), since every user's
    job runs as the same account and would otherwise read another user's outputs (which
    jobs write readable by their account alone). :class:`Outside` naming the reason
    otherwise."""
    if user is None or not path.exists():  # (what does not exist is said elsewhere)
        return path
    for root in roots:
        own = Path(root) / user
        if path == own or path.is_relative_to(own):
            return path
    top = next((Path(r) for r in roots if path.is_relative_to(r)), None)
    try:
        shared = bool(path.stat().st_mode & 0o004)
        where = path.parent
        while shared and top is not None and where != top and where.is_relative_to(top):
            shared = bool(where.stat().st_mode & 0o001)
            where = where.parent
    except OSError:
        shared = False
    if not shared:
        raise Outside(
            f"{path} is neither in your own directory nor readable by everyone (another "
            "user's file: a job reads only its own and shared data)"
        )
    return path
