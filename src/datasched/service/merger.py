"""Each completed request's result, merged on a worker and kept in the store.

A packet's result is bytes a user's code made in a sandbox; merging them means running that
code's classes (their ``__add__``, their ``postprocess``), so the daemon never does it: the
:class:`Merger` hands a completed request's packet results to the runner, which merges them
on a worker, in a sandbox that loaded the request's processor, and stores the merged bytes
(or why they could not be merged) on the request. ``GET /requests/{id}/result`` serves them
as they are. A daemon restarted before a merge ended merges again; so a daemon stopping
leaves the merges not done yet (and one the runner's stop cut short) for its next start,
quietly: the daemon stops its merger before its runner (``Dispatcher.stop``), the merger
stops between merges once asked to, and a merge the runner's stop ends while the merger is
stopping is not an error.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from typing import Protocol

from sqlalchemy import select

from datasched.service.contracts import JobState, ProcessorWork
from datasched.service.periodic import Periodic
from datasched.service.store.db import Store
from datasched.service.store.models import Job, Packet, Request
from datasched.service.store.ops import work_from_json

__all__ = ["EMPTY_RESULT", "Merger", "Merges"]

log = logging.getLogger(__name__)

EMPTY_RESULT = pickle.dumps(None, protocol=pickle.HIGHEST_PROTOCOL)
"""The result of a request none of whose packets returned one (no events)."""


class Merges(Protocol):
    """What the merger needs of the runner."""

    def merge(self, work: ProcessorWork, results: Sequence[bytes]) -> bytes:
        """The merge of ``results``, made on a worker; ``ValueError`` saying why not."""
        ...


class Merger(Periodic):
    """A thread merging completed requests' results, one at a time, every ``period_s`` or
    when woken."""

    name = "merger"

    def __init__(self, store: Store, runner: Merges, *, period_s: float = 1.0) -> None:
        super().__init__()
        self.store = store
        self.runner = runner
        self.period_s = period_s

    def pending(self, limit: int = 20) -> list[tuple[str, ProcessorWork]]:
        """Completed requests of processor work without a result or an error yet."""
        out: list[tuple[str, ProcessorWork]] = []
        with self.store.reading() as s:
            ids = s.scalars(
                select(Request.id)
                .where(
                    Request.state == JobState.COMPLETED.value,
                    Request.result.is_(None),
                    Request.result_error.is_(None),
                )
                .order_by(Request.updated)
                .limit(limit)
            ).all()
            for request_id in ids:
                job = s.scalars(select(Job).where(Job.request_id == request_id).limit(1)).first()
                work = work_from_json(job.work) if job is not None else None
                if isinstance(work, ProcessorWork):
                    out.append((request_id, work))
        return out

    def merge_once(self) -> int:
        """Merge what is pending; how many requests got a result or an error."""
        n = 0
        for request_id, work in self.pending():
            if self.stopping:
                break  # the daemon stops: what is left is merged at its next start
            with self.store.reading() as s:
                blobs = [
                    b
                    for b in s.scalars(
                        select(Packet.result)
                        .join(Job, Packet.job_id == Job.id)
                        .where(Job.request_id == request_id, Packet.result.is_not(None))
                        .order_by(Packet.job_id, Packet.url, Packet.start)
                    )
                    if b is not None
                ]
            merged: bytes | None = None
            error: str | None = None
            if not blobs:
                merged = EMPTY_RESULT
            else:
                try:
                    merged = self.runner.merge(work, blobs)
                except ValueError as exc:
                    error = f"the results could not be merged: {exc}"[:20000]
                except Exception:  # the runner is down or busy: tried again later
                    if self.stopping:
                        # The runner stopped under the merge: a clean stop, not a failure.
                        log.info("merging request %s: left for the next start", request_id)
                        break
                    log.exception("merging the results of request %s failed", request_id)
                    continue
            with self.store.session() as s:
                req = s.get(Request, request_id)
                # Stored only if no result came meanwhile (another daemon's merger on the same
                # store, or a merge begun before a restart): the first one stands.
                if req is not None and req.result is None and req.result_error is None:
                    req.result, req.result_error = merged, error
            n += 1
        return n

    round = merge_once
