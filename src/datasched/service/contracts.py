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

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "CatalogLookup",
    "ClusterSnapshot",
    "CommandWork",
    "ElementaryJob",
    "FieldError",
    "FileRef",
    "FileTodo",
    "InputSpec",
    "JobSnapshot",
    "JobState",
    "MetaJobRequest",
    "NodeRates",
    "NodeSnapshot",
    "PacketDone",
    "ProcessorWork",
    "RequestInvalid",
    "RunnerListener",
    "SnapshotError",
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
    as one packet over all its files). ``started_at``: when the packet began on its worker
    (POSIX seconds; None: not known), so that the store knows what a packet took, a job's
    start on a node included (docs/service-whatif.md). ``slot_at``: when it got its slot
    there (its file fetched, the slot's CPU free: after its wait behind other packets on the
    node), from which the ETAs measure a file's run."""

    job_id: str
    url: str
    start: int
    stop: int
    node: str
    n_bytes: int
    cpu_s: float
    result: bytes | None = None
    started_at: float | None = None
    slot_at: float | None = None


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


# -- the daemon's live state, for predictions (ETA, what-if) -----------------------------------


class SnapshotError(ValueError):
    """A cluster snapshot is malformed: ``field`` is a path into it (``jobs[3].files[0].todo``),
    ``reason`` says what is wrong."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True, slots=True)
class NodeRates:
    """What a node was measured to do, per slot; None: not measured yet (the predictor then
    takes the mean of the nodes that were, else its defaults)."""

    cached_events_per_s: float | None = None
    """Events a slot processes per second reading the node's own cache."""
    peer_events_per_s: float | None = None
    """The same, reading another node's cache."""
    tertiary_events_per_s: float | None = None
    """The same, reading central storage."""
    tertiary_bytes_per_s: float | None = None
    """Bytes per second the node fetches from central storage."""


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """A node (a Dask worker) now: its slots, its cache's capacity and content (URLs)."""

    name: str
    slots: int = 1
    cache_bytes: int = 0
    cached: tuple[str, ...] = ()
    rates: NodeRates = field(default_factory=NodeRates)
    warm_users: tuple[str, ...] = ()
    """The users whose sandbox is warm there now (their next packet starts none:
    ``ClusterSnapshot.user_setup_s``), the least recently used first: the simulation keeps
    :data:`~datasched.sandbox.confine.KEEP` of them warm at once, as a worker does."""


@dataclass(frozen=True, slots=True)
class FileTodo:
    """A file of an elementary job: its events and bytes, and the entry ranges
    ``[start, stop)`` still to process (None: all of it; empty: none left)."""

    url: str
    n_events: int
    n_bytes: int
    todo: tuple[tuple[int, int], ...] | None = None
    under_way: bool = False
    """Packets of it are out on a worker now (sent, not stored yet)."""

    @property
    def events_left(self) -> int:
        if self.todo is None:
            return self.n_events
        return sum(b - a for a, b in self.todo)


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    """An elementary job queued or running: ``submitted_s`` is when it was submitted (the
    same clock as the snapshot's time), ``node`` where it runs (None: queued)."""

    id: str
    request_id: str
    files: tuple[FileTodo, ...]
    submitted_s: float
    user: str = ""
    group: str = ""
    priority: float = 1.0
    cpu_s_per_event: float | None = None
    """Measured on its packets so far (None: not yet)."""
    node: str | None = None

    @property
    def events_left(self) -> int:
        return sum(f.events_left for f in self.files)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """The daemon's live state at ``time_s`` (seconds, the daemon's clock): the nodes, their
    caches and measured rates, and the elementary jobs queued or running with what is left of
    them. What the simulator predicts from (:mod:`datasched.service.whatif`)."""

    time_s: float
    nodes: tuple[NodeSnapshot, ...]
    jobs: tuple[JobSnapshot, ...] = ()
    user_setup_s: float | None = None
    """Seconds a node spends on a user's first packet there when not warm for that user (a
    sandbox's start, measured: :mod:`datasched.service.warm_sandboxes`); None: not
    measured, nothing charged."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able dict; :meth:`from_dict` reads it back."""
        plain: dict[str, Any] = _plain(asdict(self))
        return plain

    @classmethod
    def from_dict(cls, data: Any) -> ClusterSnapshot:
        """The snapshot of :meth:`as_dict`'s form, checked (:meth:`check`); a
        :class:`SnapshotError` names the first bad field."""
        d = _obj(data, "snapshot")
        _known(d, ClusterSnapshot, "")
        nodes = tuple(_node(n, f"nodes[{i}]") for i, n in enumerate(_list(d, "nodes", "")))
        jobs = tuple(_job(j, f"jobs[{i}]") for i, j in enumerate(_list(d, "jobs", "", True)))
        snap = cls(_num(d, "time_s", ""), nodes, jobs, _num(d, "user_setup_s", "", default=None))
        snap.check()
        return snap

    def check(self) -> None:
        """Raise :class:`SnapshotError` unless the snapshot is consistent: node names
        unique, jobs naming known nodes, ranges within their files, a file the same
        everywhere it is named, ids unique."""
        if not self.nodes:
            raise SnapshotError("nodes", "a snapshot needs at least one node")
        names: set[str] = set()
        for i, n in enumerate(self.nodes):
            if n.slots < 1:
                raise SnapshotError(
                    f"nodes[{i}].slots",
                    f"must be at least 1, got {n.slots!r} (leave out a node that runs nothing)",
                )
            if n.name in names:
                raise SnapshotError(f"nodes[{i}].name", f"{n.name!r} is named twice")
            names.add(n.name)
        ids: set[str] = set()
        sizes: dict[str, tuple[int, int]] = {}
        for i, j in enumerate(self.jobs):
            if j.id in ids:
                raise SnapshotError(f"jobs[{i}].id", f"{j.id!r} is named twice")
            ids.add(j.id)
            if j.node is not None and j.node not in names:
                raise SnapshotError(f"jobs[{i}].node", f"{j.node!r} is not a node of the snapshot")
            for k, f in enumerate(j.files):
                where = f"jobs[{i}].files[{k}]"
                if sizes.setdefault(f.url, (f.n_events, f.n_bytes)) != (f.n_events, f.n_bytes):
                    raise SnapshotError(where, f"{f.url} has other sizes in another job")
                for r, (a, b) in enumerate(f.todo or ()):
                    if not 0 <= a < b <= f.n_events:
                        raise SnapshotError(
                            f"{where}.todo[{r}]",
                            f"[{a}, {b}) is not a non-empty range within 0..{f.n_events}",
                        )


_RATE_FIELDS = (
    "cached_events_per_s",
    "peer_events_per_s",
    "tertiary_events_per_s",
    "tertiary_bytes_per_s",
)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _obj(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SnapshotError(path, f"expected an object, got {type(value).__name__}")
    return value


def _known(d: dict[str, Any], kind: Any, path: str) -> None:
    """Refuse a key that is not a field of dataclass ``kind``: a misspelt field would
    otherwise be read as its default."""
    allowed = {f.name for f in fields(kind)}
    for key in d:
        if key not in allowed:
            where = _at(path, str(key))
            raise SnapshotError(where, f"unknown field (known: {', '.join(sorted(allowed))})")


def _list(d: dict[str, Any], key: str, path: str, optional: bool = False) -> list[Any]:
    value = d.get(key, [] if optional else None)
    if not isinstance(value, list):
        why = "missing" if value is None else f"expected a list, got {type(value).__name__}"
        raise SnapshotError(_at(path, key), why)
    return value


def _num(d: dict[str, Any], key: str, path: str, *, default: Any = ..., whole: bool = False) -> Any:
    value = d.get(key, default)
    if value is ...:
        raise SnapshotError(_at(path, key), "missing")
    if value is None and default is None:
        return None
    kinds: tuple[type[int] | type[float], ...] = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        kind = "a whole number" if whole else "a finite number"
        raise SnapshotError(_at(path, key), f"expected {kind}, got {value!r}")
    if float(value) < 0:
        raise SnapshotError(_at(path, key), f"must not be negative, got {value!r}")
    return value


def _text(d: dict[str, Any], key: str, path: str, default: Any = ...) -> Any:
    value = d.get(key, default)
    if value is ...:
        raise SnapshotError(_at(path, key), "missing")
    if value is None and default is None:
        return None
    if not isinstance(value, str) or (default is ... and not value):
        raise SnapshotError(_at(path, key), f"expected a non-empty string, got {value!r}")
    return value


def _node(data: Any, path: str) -> NodeSnapshot:
    d = _obj(data, path)
    _known(d, NodeSnapshot, path)
    rates = _obj(d.get("rates", {}), _at(path, "rates"))
    rate_path = _at(path, "rates")
    _known(rates, NodeRates, rate_path)
    values = {k: _num(rates, k, rate_path, default=None) for k in _RATE_FIELDS}
    for k, v in values.items():
        if v == 0:
            raise SnapshotError(_at(rate_path, k), "must be positive (or null: not measured)")
    cached = _list(d, "cached", path, True)
    for i, url in enumerate(cached):
        if not isinstance(url, str) or not url:
            raise SnapshotError(f"{path}.cached[{i}]", f"expected a URL, got {url!r}")
    warm = _list(d, "warm_users", path, True)
    for i, user in enumerate(warm):
        if not isinstance(user, str) or not user:
            raise SnapshotError(f"{path}.warm_users[{i}]", f"expected a user, got {user!r}")
    return NodeSnapshot(
        name=_text(d, "name", path),
        slots=_num(d, "slots", path, default=1, whole=True),
        cache_bytes=_num(d, "cache_bytes", path, default=0, whole=True),
        cached=tuple(cached),
        rates=NodeRates(**values),
        warm_users=tuple(warm),
    )


def _file(data: Any, path: str) -> FileTodo:
    d = _obj(data, path)
    _known(d, FileTodo, path)
    todo_raw = d.get("todo")
    todo: tuple[tuple[int, int], ...] | None = None
    if todo_raw is not None:
        ranges = _list(d, "todo", path)
        for r, pair in enumerate(ranges):
            ok = isinstance(pair, list) and len(pair) == 2
            if not ok or any(isinstance(x, bool) or not isinstance(x, int) for x in pair):
                raise SnapshotError(f"{path}.todo[{r}]", f"expected [start, stop], got {pair!r}")
        todo = tuple((a, b) for a, b in ranges)
    under_way = d.get("under_way", False)
    if not isinstance(under_way, bool):
        raise SnapshotError(_at(path, "under_way"), f"expected true or false, got {under_way!r}")
    return FileTodo(
        url=_text(d, "url", path),
        n_events=_num(d, "n_events", path, whole=True),
        n_bytes=_num(d, "n_bytes", path, whole=True),
        todo=todo,
        under_way=under_way,
    )


def _job(data: Any, path: str) -> JobSnapshot:
    d = _obj(data, path)
    _known(d, JobSnapshot, path)
    files = tuple(_file(f, f"{path}.files[{k}]") for k, f in enumerate(_list(d, "files", path)))
    cpu = _num(d, "cpu_s_per_event", path, default=None)
    if cpu == 0:
        raise SnapshotError(_at(path, "cpu_s_per_event"), "must be positive (or null)")
    priority = d.get("priority", 1.0)
    if isinstance(priority, bool) or not isinstance(priority, int | float):
        raise SnapshotError(_at(path, "priority"), f"expected a number, got {priority!r}")
    if not 0 < priority < math.inf:
        raise SnapshotError(
            _at(path, "priority"), f"expected a finite number > 0, got {priority!r}"
        )
    return JobSnapshot(
        id=_text(d, "id", path),
        request_id=_text(d, "request_id", path),
        files=files,
        submitted_s=_num(d, "submitted_s", path),
        user=_text(d, "user", path, ""),
        group=_text(d, "group", path, ""),
        priority=float(priority),
        cpu_s_per_event=cpu,
        node=_text(d, "node", path, None),
    )
