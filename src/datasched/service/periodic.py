"""A thread that does one round of work every period, or at once when woken, until stopped:
the daemon's dispatcher and its merger (a round that raises is logged, and the next one
retries)."""

from __future__ import annotations

import logging
import threading

__all__ = ["Periodic"]

log = logging.getLogger(__name__)


class Periodic:
    """Calls :meth:`round` every ``period_s`` seconds, or at once after :meth:`wake`, in a
    thread named ``name``, from :meth:`start` until :meth:`stop`."""

    name = "periodic"
    period_s = 1.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def round(self) -> object:
        """One round of work."""
        raise NotImplementedError

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called: a round under way should end early."""
        return self._stop.is_set()

    def wake(self) -> None:
        """Do a round now."""
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.round()
            except Exception:  # keep serving; the next round retries
                log.exception("%s: a round failed", self.name)
            self._wake.wait(self.period_s)
            self._wake.clear()

    def stop(self) -> None:
        """Stop the loop (after the round under way)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
