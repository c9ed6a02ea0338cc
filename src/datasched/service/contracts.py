"""What the parts of the service agree on: requests, elementary jobs, the catalog's answers,
and what the runner reports back.

The service has three parts built separately and joined by these types:

* the **request language** (:mod:`datasched.service.request`): STAR's meta-job requests in
  XML (the paper's Appendix A) and an equivalent YAML, parsed into a :class:`MetaJobRequest`,
  checked (every problem a :class:`FieldError`), and split into :class:`ElementaryJob`s;
* the **store, catalog, users and API** (:mod:`datasched.service.store`,
  :mod:`datasched.service.catalog`, :mod:`datasched.service.app`): what is persisted and
  served; the catalog answers :class:`CatalogLookup`;
* the **runner** (:mod:`datasched.service.runner`): runs elementary jobs on the cluster
  through the runtime engine and tells a :class:`RunnerListener` what happens, packet by
  packet, so the store always knows which event ranges are done (a restarted daemon resumes
  from them: no event counted twice or lost).

Nothing here imports FastAPI, SQLAlchemy or Dask.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "CatalogLookup",
    "CommandWork",
    "ElementaryJob",
    "FieldError",
    "FileRef",
    "InputSpec",
    "JobState",
    "MetaJobRequest",
    "PacketDone",
    "ProcessorWork",
    "RequestInvalid",
    "RunnerListener",
    "SplitStrategy",
]


class JobState(StrEnum):
    """States of a meta-job request and of its elementary jobs (STAR's, plus ``failed``)."""

    PENDING = "pending"
    SUBMITTED = "submitted"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    ABORTED = "aborted"
    FAILED = "failed"
    REFUSED = "refused"
    """An invalid request, kept so that its owner can read why."""

    @property
    def final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({JobState.COMPLETED, JobState.ABORTED, JobState.FAILED, JobState.REFUSED})


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem of a request: ``field`` is a path into it (``input[2].path``,
    ``process.command``), ``reason`` says what is wrong in words."""

    field: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason}


class RequestInvalid(ValueError):
    """A request refused, with every problem found."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        self.errors = tuple(errors)
        super().__init__("; ".join(f"{e.field}: {e.reason}" for e in self.errors))


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file as the catalog knows it: where it is kept (``url``, any fsspec URL), its tree
    (ROOT files), its events and bytes, and the nodes whose caches hold it."""

    url: str
    n_events: int
    n_bytes: int
    tree: str | None = None
    dataset: str | None = None
    cached_on: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One ``<input>`` of a request: a file or a wildcard path (``path``, optionally on
    ``machine``), or a catalog query (``catalog``: ``"year=2004 system=AuAu"``);
    ``n_files`` caps how many files it brings (STAR's ``nFiles``; None: all)."""

    path: str | None = None
    machine: str | None = None
    catalog: str | None = None
    n_files: int | None = None


@dataclass(frozen=True, slots=True)
class ProcessorWork:
    """A datasched processor over the events (as ``datasched run``): ``processor`` is
    ``module:attr`` or ``file.py:attr`` on a configured root."""

    processor: str
    schema: str = "none"
    processor_args: Mapping[str, Any] = field(default_factory=dict)
    tree: str | None = None
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class CommandWork:
    """A STAR-style command: an executable run on the worker with its elementary job's files
    (local cached paths) as its input list (the file named by ``$FILELIST``, one path a line,
    and ``$INPUTFILE0..n``), stdout and stderr to the named locations."""

    command: str
    stdin: str | None = None
    stdout: str | None = None
    stderr: str | None = None


@dataclass(frozen=True, slots=True)
class MetaJobRequest:
    """A user's request, parsed (not yet checked against the catalog or storage)."""

    username: str
    work: ProcessorWork | CommandWork
    inputs: tuple[InputSpec, ...]
    title: str = ""
    description: str = ""
    output: str | None = None
    """Where results (processor) or outputs go; None: kept by the service for ``result``."""
    policy: str | None = None
    """The core policy that places its jobs; None: the daemon's."""
    split: SplitStrategy | None = None
    """How it becomes elementary jobs; None: the administrator's default."""
    group: str | None = None
    max_files_per_job: int | None = None


class SplitStrategy(StrEnum):
    """How a request becomes elementary jobs (the administrator's choice)."""

    BY_HOST = "by-host"
    """The paper's: one elementary job per host holding files (per machine in the input)."""
    BY_CACHE = "by-cache"
    """One per node whose cache holds the files; the rest in jobs of their own."""
    BY_POLICY = "by-policy"
    """One job of the core over all the files; the core's policy splits and places it."""


@dataclass(frozen=True, slots=True)
class ElementaryJob:
    """One elementary job request: part of a request's files, with the node preferred for it
    (None: the core decides)."""

    request_id: str
    index: int
    files: tuple[FileRef, ...]
    work: ProcessorWork | CommandWork
    node: str | None = None
    user: str = ""
    group: str = ""
    priority: float = 1.0

    @property
    def id(self) -> str:
        return f"{self.request_id}.{self.index}"

    @property
    def n_events(self) -> int:
        return sum(f.n_events for f in self.files)


class CatalogLookup(Protocol):
    """What the request checks and the splitter need from the catalog."""

    def query(self, query: str) -> list[FileRef]:
        """The files matching a keyword query (``year=2004 system=AuAu``); raises
        ``ValueError`` naming the bad keyword."""
        ...

    def file(self, url: str) -> FileRef | None:
        """The file at ``url`` (or a path on a configured root), or None if unknown."""
        ...


@dataclass(frozen=True, slots=True)
class PacketDone:
    """A packet of an elementary job whose result is in: events ``[start, stop)`` of
    ``url`` (entry numbers within the file), on ``node``. ``result`` is the packet's
    accumulator, pickled (processor work) or None (a command runs once per elementary job,
    as one packet over all its files)."""

    job_id: str
    url: str
    start: int
    stop: int
    node: str
    n_bytes: int
    cpu_s: float
    result: bytes | None = None


class RunnerListener(Protocol):
    """What the runner tells the store. Calls come from the runner's event loop, in order.
    A restarted daemon hands the runner each job with the ranges already done, and the runner
    runs only the rest: each range's result is stored exactly once."""

    def job_state(
        self,
        job_id: str,
        state: JobState,
        *,
        node: str | None = None,
        log: str = "",
        failed_file: str | None = None,
    ) -> None: ...

    def packet_done(self, packet: PacketDone) -> None: ...
