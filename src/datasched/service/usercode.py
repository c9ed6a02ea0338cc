"""A request's processor as the daemon handles it: as data, never as code.

:func:`user_code` turns a request's processor into a
:class:`~datasched.sandbox.confine.UserCode`: a file's text read as bytes, or a module's
name, with the constructor's arguments as JSON. :class:`SandboxCheck` is the check at
submission that needs the code itself (the file runs, the class takes the arguments): it runs
in a sandboxed child on the daemon's machine, within a time limit, and gives a field error or
nothing. The daemon itself never imports, instantiates or unpickles what a user wrote.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from datasched.sandbox.confine import Confinement, LimitReached, SandboxUnavailable, UserCode
from datasched.sandbox.host import ChildFailed, check_code
from datasched.sandbox.pool import ChildPool
from datasched.service.contracts import FieldError, ProcessorWork
from datasched.service.request.paths import Outside, locate

__all__ = ["SandboxCheck", "SandboxCounter", "user_code"]

KEEP_GOOD = 1024
"""Processors (text and arguments) remembered as loading, most recent first."""


def user_code(work: ProcessorWork, roots: Sequence[Path], owner: str = "") -> UserCode:
    """The processor of ``work`` as data, run for ``owner``'s jobs (sandboxed children are
    not shared across owners); ``ValueError`` naming the field if its file is not under a
    root, or its arguments are not plain data."""
    ref = work.processor.strip()
    target, sep, _ = ref.rpartition(":")
    target = target if sep else ref
    try:
        args = json.dumps(dict(work.processor_args), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"processor_args: not plain data: {exc}") from None
    if not target.endswith(".py"):
        return UserCode(ref, None, None, args, owner)
    try:
        path = locate(target, roots)
        source = path.read_bytes()
    except (Outside, OSError) as exc:
        raise ValueError(f"processor: {ref!r}: {exc}") from None
    return UserCode(ref, source, str(path), args, owner)


class SandboxCheck:
    """Loads a request's processor in a sandbox (``confine``) before the request is
    accepted: its file runs and its class takes the arguments, within ``timeout_s``. A
    processor seen loading before (the same text and arguments) is not tried again."""

    def __init__(
        self, confine: Confinement, roots: Sequence[Path], *, timeout_s: float = 60.0
    ) -> None:
        self.confine = confine
        self.bounded = replace(confine, cpu_s=timeout_s, wall_s=timeout_s)
        """A check's sandbox ends within its time, whatever becomes of the daemon."""
        self.roots = [Path(r) for r in roots]
        self.timeout_s = timeout_s
        self._good: OrderedDict[str, None] = OrderedDict()

    def __call__(self, work: ProcessorWork) -> FieldError | None:
        try:
            code = user_code(work, self.roots)
        except ValueError as exc:
            field, _, reason = str(exc).partition(": ")
            return FieldError(field, reason)
        if code.key in self._good:
            self._good.move_to_end(code.key)
            return None
        failed = check_code(self.bounded, code, timeout_s=self.timeout_s)
        if failed is None:
            self._good[code.key] = None
            while len(self._good) > KEEP_GOOD:
                self._good.popitem(last=False)
            return None
        trace = f"\n{failed.traceback}" if failed.traceback else ""
        return FieldError("processor", f"{failed.message}{trace}")


class SandboxCounter:
    """Counts the events of a ROOT file the catalog does not know, for the daemon's checks,
    in a sandbox: parsing a user's file (uproot builds classes from what the file says) is
    not done in the daemon either. One child serves the counts, kept while they come."""

    def __init__(self, confine: Confinement, *, timeout_s: float = 60.0) -> None:
        self.confine = replace(confine, cpu_s=timeout_s, wall_s=timeout_s)
        self.timeout_s = timeout_s
        self.pool = ChildPool(keep=1, idle_s=30.0)

    def __call__(self, url: str, tree: str | None) -> int:
        if tree is None:
            raise ValueError(f"{url}: name the tree to count its events")
        path = url.removeprefix("file://")
        try:
            with self.pool.borrow(self.confine, None) as child:
                return child.count(path, url=url, tree=tree, timeout_s=self.timeout_s)
        except ChildFailed as exc:
            raise ValueError(exc.message) from None
        except (LimitReached, SandboxUnavailable, OSError) as exc:
            raise ValueError(f"{url}: cannot count its events: {exc}") from None
