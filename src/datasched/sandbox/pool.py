"""Sandboxed children kept idle between packets, by code and confinement: a job's next
packet on a host finds its processor loaded (its imports are paid once per user, processor
and host). The code's key names its owner (:attr:`~datasched.sandbox.confine.UserCode.owner`),
so a child that ran one user's packets, and keeps their processor's state and files' descriptors,
never runs another user's."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from datasched.sandbox.confine import IDLE_S, KEEP, Confinement, UserCode
from datasched.sandbox.host import Child

__all__ = ["IDLE_S", "KEEP", "ChildPool"]


class ChildPool:
    """Children kept idle between packets, by code (its owner among it) and confinement: a
    job's next packet on this host finds its processor loaded. At most ``keep`` idle
    children; one idle past ``idle_s`` is closed."""

    def __init__(self, keep: int = KEEP, idle_s: float = IDLE_S) -> None:
        self.keep = keep
        self.idle_s = idle_s
        self._idle: dict[tuple[str, Confinement], list[Child]] = {}
        self._lock = threading.Lock()
        self._reaper: threading.Thread | None = None
        self.started = 0

    @contextlib.contextmanager
    def borrow(
        self, conf: Confinement, code: UserCode | None, *, scratch_base: str | Path | None = None
    ) -> Iterator[Child]:
        """A child for ``code`` (an idle one, or a new one; None: a child loading no code),
        given back afterwards unless it broke."""
        key = (code.key if code is not None else "", conf)
        with self._lock:
            stack = self._idle.get(key, [])
            child = stack.pop() if stack else None
            self._ensure_reaper()
        if child is None:
            child = Child(conf, code, scratch_base=scratch_base)
            child.start()
            with self._lock:
                self.started += 1
        try:
            yield child
        except BaseException:
            child.close()
            raise
        if child.broken:
            return
        with self._lock:
            self._idle.setdefault(key, []).append(child)
            dropped = self._trim()
        for c in dropped:
            c.close()

    def _trim(self) -> list[Child]:
        everyone = sorted((c for s in self._idle.values() for c in s), key=lambda c: c.last_used)
        now = time.monotonic()
        drop = [c for c in everyone if now - c.last_used > self.idle_s]
        alive = [c for c in everyone if c not in drop]
        drop += alive[: max(len(alive) - self.keep, 0)]
        for key in list(self._idle):
            self._idle[key] = [c for c in self._idle[key] if c not in drop]
            if not self._idle[key]:
                del self._idle[key]
        return drop

    def _ensure_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="sandbox-reaper", daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        while True:
            time.sleep(min(self.idle_s / 2, 10.0))
            with self._lock:
                dropped = self._trim()
            for c in dropped:
                c.close()

    def close(self) -> None:
        """Close every idle child."""
        with self._lock:
            everyone = [c for s in self._idle.values() for c in s]
            self._idle.clear()
        for c in everyone:
            c.close()

    def __len__(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._idle.values())
