"""How a packet's events are read on a worker: flat awkward arrays or coffea's NanoEvents,
reading only the branches the processor uses.

* ``schema: none`` (the default): a flat awkward array of the tree's branches (or of those
  named by ``columns``, names or globs), read with uproot as *virtual* arrays: a branch is
  read when the processor first touches it, so projection needs no list.
* ``schema: base`` or ``nanoaod``: NanoEvents built by coffea's factory in its virtual mode
  (the ``coffea`` extra), with ``events.metadata`` holding the dataset, the file's URL, the
  tree, the entry range and the file's UUID, as coffea's Runner gives them, and the
  dataset's own metadata. A job's ``schema_options`` (an allow-list per schema,
  :data:`SCHEMA_OPTIONS`) are the schema class's class attributes, such as NanoAODSchema's
  ``error_missing_event_ids``: they are set here, in the process that builds the events, on a
  subclass made for them (:func:`schema_class`), so that jobs with other options running in
  the same worker at the same time each see their own, and coffea's class is left as it is.

Either way the packet reports the bytes it read: the stored size of the baskets of the
branches it touched that overlap its entries (what uproot reads and decompresses).

Opening a file costs a packet more than its events may: uproot reads the tree's header, one
object per branch (1 s for the 947 branches of a NanoAOD file; on the demo's small files,
a third of a packet's CPU). So each worker process keeps the files it opened, with their
parsed trees, in a pool shared by its threads (:class:`OpenFiles`), and the packets of a
file its node caches pay that price once, not once per packet.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uproot

__all__ = [
    "SCHEMAS",
    "SCHEMA_OPTIONS",
    "EventsError",
    "ReadSpec",
    "branch_bytes",
    "forget_open_files",
    "open_events",
    "open_remote",
    "schema_class",
    "schema_mismatch",
    "trees_in",
]

SCHEMAS = ("none", "base", "nanoaod")
"""How a job sees its events: flat arrays, or coffea's NanoEvents with its BaseSchema or
NanoAODSchema."""

SCHEMA_OPTIONS: dict[str, dict[str, type]] = {
    "none": {},
    "base": {},
    "nanoaod": {"error_missing_event_ids": bool, "warn_missing_crossrefs": bool},
}
"""The options a job may set per schema (class attributes of coffea's schema class), with
their types: an allow-list, since an option is set on a class that builds everyone's events
(docs/runtime.md, "Schemas and their options")."""

SchemaOptions = tuple[tuple[str, Any], ...]
"""A job's schema options, sorted by name (hashable: they key the classes made for them)."""


class EventsError(ValueError):
    """The events of a file cannot be read (no such tree, corrupted file): a data error."""


@dataclass(frozen=True, slots=True)
class ReadSpec:
    """How a job's packets read their events (the same for every packet of the job)."""

    dataset: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The dataset's own metadata (a coffea fileset's ``metadata``)."""
    schema: str = "none"
    columns: tuple[str, ...] | None = None
    """Branch names or globs to read; None: whatever the processor touches."""
    schema_options: SchemaOptions = ()
    """The schema class's attributes to set (names from :data:`SCHEMA_OPTIONS`)."""


def trees_in(f: Any) -> list[str]:
    """The names of the TTrees of an open uproot file (for error messages)."""
    return sorted({k.split(";")[0] for k, c in f.classnames().items() if c == "TTree"})


def _tree(f: Any, url: str, tree: str) -> Any:
    try:
        obj = f[tree]
    except Exception as exc:
        trees = trees_in(f)
        has = f"its trees: {', '.join(trees)}" if trees else "it holds no tree"
        raise EventsError(f"{url}: no tree {tree!r} ({has})") from exc
    if not hasattr(obj, "num_entries"):
        raise EventsError(f"{url}: {tree!r} is a {f.classname_of(tree)}, not a tree")
    return obj


def branch_bytes(tree: Any, names: Sequence[str], start: int, stop: int) -> int:
    """Stored bytes of the baskets of branches ``names`` that hold entries ``[start, stop)``
    (compressed size; a basket kept inside the tree's header counts its data size)."""
    total = 0
    for name in dict.fromkeys(names):
        try:
            branch = tree[name]
        except Exception:
            continue  # a name the schema made up (a counter's offsets): nothing stored
        n = branch.num_baskets
        embedded = list(getattr(branch, "embedded_baskets", None) or [])
        first_embedded = n - len(embedded)  # baskets kept in the header come last
        for i in range(n):
            a, b = branch.basket_entry_start_stop(i)
            if a < stop and b > start:
                stored = int(branch.basket_compressed_bytes(i))
                if not stored and i >= first_embedded:
                    stored = int(embedded[i - first_embedded].border)
                total += stored
    return total


@dataclass(slots=True)
class Opened:
    """A packet's events while their file is open, and what reading them cost."""

    events: Any
    tree: Any
    start: int
    stop: int
    log: list[Any]
    columns: list[str] | None = None

    def bytes_read(self) -> int:
        """Bytes of the baskets read so far (the branches touched, or named)."""
        names = [getattr(a, "branch", a) for a in self.log]
        if self.columns is not None:
            names += self.columns
        return branch_bytes(self.tree, [str(n) for n in names], self.start, self.stop)


OPEN_BRANCHES = 8_000
"""The branches whose trees a worker process keeps open, over all its open files (about
eight NanoAOD files of 947 branches, 16 MB each; 64 files of the demo's few branches)."""
OPEN_FILES = 64
"""The most files a worker process keeps open, however few their branches."""
ARRAY_CACHE_BYTES = 200 * 10**6
"""Decompressed arrays a worker process keeps, over all its open files (a tenth of a
worker's default memory limit)."""

_Key = tuple[str, int, int, int]


class OpenFiles:
    """Local files kept open between packets, shared by a process's threads.

    A handle is lent to one thread at a time (:meth:`lend`, :meth:`give_back`): uproot's
    file and tree objects are not shared by two readers, and a thread that finds the file's
    handles all lent opens another. A key is the path with its size, inode and modification
    time, so a file fetched again (a new copy) is a new key. Idle handles are kept, least
    recently used first out, while their trees' branches stay within ``branches`` and their
    number within ``files``; a handle whose file was evicted or replaced meanwhile is closed
    the next time a file is opened (it would hold the deleted file's disk space)."""

    def __init__(
        self,
        branches: int = OPEN_BRANCHES,
        files: int = OPEN_FILES,
        array_bytes: int = ARRAY_CACHE_BYTES,
    ) -> None:
        self.branches = branches
        self.files = files
        self.arrays = uproot.LRUArrayCache(array_bytes)
        """The arrays the open files' packets read, shared by them all (a packet reading
        entries another read gets them decompressed)."""
        self._lock = threading.Lock()
        self._idle: OrderedDict[_Key, list[Any]] = OrderedDict()
        self._weight: dict[_Key, int] = {}
        """Branches of a key's tree (a handle's weight), learnt when it is given back."""
        self.hits = 0
        self.opened = 0

    @staticmethod
    def key(path: str) -> _Key:
        st = os.stat(path)  # noqa: PTH116 (a str key: no Path made per file opened)
        return (path, st.st_size, st.st_ino, st.st_mtime_ns)

    def lend(self, path: str) -> tuple[Any, _Key]:
        """An open uproot file at the local ``path``, and its key to give it back with."""
        key = self.key(path)
        with self._lock:
            handles = self._idle.get(key)
            if handles:
                self.hits += 1
                f = handles.pop()
                if not handles:
                    del self._idle[key]
                return f, key
            self.opened += 1
            stale = self._stale()
        _close(stale)
        # One array cache for all the files, not uproot's 100 MB for each: kept open, 64
        # files could otherwise hold gigabytes of decompressed arrays a worker.
        return uproot.open(path, array_cache=self.arrays), key

    def give_back(self, key: _Key, f: Any, tree: Any) -> None:
        """Keep ``f`` open for the next packet (``tree``: the tree read from it, whose
        branches count towards ``branches``)."""
        weight = self._weight.get(key) or max(len(tree.keys(recursive=True)), 1)
        with self._lock:
            self._weight[key] = weight
            self._idle.setdefault(key, []).append(f)
            self._idle.move_to_end(key)
            dropped = self._trim()
        _close(dropped)

    def forget(self, path: str | None = None) -> None:
        """Close the idle handles of ``path`` (a corrupted copy about to be dropped), or all."""
        with self._lock:
            keys = [k for k in self._idle if path is None or k[0] == path]
            dropped = [f for k in keys for f in self._idle.pop(k)]
            for k in keys:
                self._weight.pop(k, None)
        _close(dropped)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(h) for h in self._idle.values())

    def _trim(self) -> list[Any]:
        dropped: list[Any] = []
        while self._idle:
            n = sum(len(h) for h in self._idle.values())
            weight = sum(self._weight[k] * len(h) for k, h in self._idle.items())
            if n <= self.files and weight <= self.branches:
                break
            key, handles = next(iter(self._idle.items()))
            dropped.append(handles.pop(0))
            if not handles:
                del self._idle[key]
                self._weight.pop(key, None)
        return dropped

    def _stale(self) -> list[Any]:
        dropped: list[Any] = []
        for key in list(self._idle):
            try:
                fresh = self.key(key[0]) == key
            except OSError:
                fresh = False
            if not fresh:
                dropped += self._idle.pop(key)
                self._weight.pop(key, None)
        return dropped


def _close(files: list[Any]) -> None:
    for f in files:
        f.close()


OPEN = OpenFiles()
"""This process's pool of open files."""


def forget_open_files(path: str | None = None) -> None:
    """Close this process's idle open files: those of ``path`` (a corrupted copy is about to
    be dropped), or all of them."""
    OPEN.forget(path)


def open_remote(url: str) -> Any:
    """An uproot file reading ``url`` where it lies, through a handle of its own.

    uproot reads ``root://`` through fsspec by default, and fsspec's XRootD filesystem keeps
    one read handle per URL for the whole process, which it closes whenever any thread opens
    a file of that URL (a copy into a cache): a read in flight on it then fails with "I/O
    operation on closed file". A worker whose cache disk is full reads a file in place while
    its next packet's copy of the same file starts, so its direct reads use uproot's own
    XRootD source, which opens a handle for this file alone."""
    if url.startswith(("root://", "xroot://")):
        return uproot.open(url, handler=uproot.source.xrootd.XRootDSource)
    return uproot.open(url)


@contextmanager
def open_events(
    path: str, url: str, tree: str, read: ReadSpec, start: int, stop: int
) -> Iterator[Opened]:
    """The entries ``[start, stop)`` of ``tree`` in the local file ``path`` (a copy of
    ``url``), read as ``read`` says, lazily: use them inside the ``with`` block, while the
    file is open. Raises :class:`EventsError` for a missing tree or too few entries."""
    if not 0 <= start <= stop:
        raise ValueError(f"{url}: entry range [{start}, {stop}) is not a range")
    if path.endswith(".parquet"):
        yield _parquet(path, url, read, start, stop)
        return
    local = "://" not in path or path.startswith("file://")
    key = None
    try:
        if local:
            f, key = OPEN.lend(path.removeprefix("file://"))
        else:
            f = open_remote(path)  # a URL read in place: not kept
    except Exception as exc:
        raise EventsError(f"{url}: not a readable ROOT file: {exc}") from exc
    try:
        t = _tree(f, url, tree)
        n = int(t.num_entries)
        if stop > n:
            raise EventsError(f"{url}: entries [{start}, {stop}) outside the file's {n}")
        log: list[Any] = []
        if read.schema == "none":
            filt = list(read.columns) if read.columns is not None else None
            events = t.arrays(
                filter_name=filt if filt is not None else uproot._util.no_filter,
                entry_start=start,
                entry_stop=stop,
                virtual=True,
                access_log=log,
            )
        else:
            events = _nanoevents(f, url, t, tree, read, start, stop, log)
        yield Opened(events, t, start, stop, log)
    except BaseException:
        f.close()  # not given back: a broken file, or a processor that raised mid-read
        raise
    if key is not None:
        OPEN.give_back(key, f, t)
    else:
        f.close()


def nanoevents_metadata(
    read: ReadSpec, url: str, tree: str, start: int, stop: int, uuid: str
) -> dict[str, Any]:
    """``events.metadata`` as coffea's Runner sets it, then the dataset's own metadata."""
    return {
        "dataset": read.dataset,
        "filename": url,
        "treename": tree,
        "entrystart": start,
        "entrystop": stop,
        "fileuuid": uuid,
        **read.metadata,
    }


def schema_class(schema: str, options: SchemaOptions = ()) -> Any:
    """coffea's schema class for ``schema`` (``base`` or ``nanoaod``), or, with ``options``,
    a subclass of it with those class attributes (one per schema and options, made once in
    each process). ``ValueError`` for an option not in :data:`SCHEMA_OPTIONS` or of the
    wrong type: what the jobs file's check refused cannot be set here either."""
    allowed = SCHEMA_OPTIONS.get(schema)
    if allowed is None or schema == "none":
        raise ValueError(f"schema {schema!r} has no schema class")
    for name, value in options:
        kind = allowed.get(name)
        if kind is None or type(value) is not kind:
            raise ValueError(f"schema {schema!r}: option {name!r}={value!r} is not allowed")
    return _schema_class(schema, tuple(sorted(options)))


@functools.lru_cache(maxsize=64)
def _schema_class(schema: str, options: SchemaOptions) -> Any:
    from coffea.nanoevents import BaseSchema, NanoAODSchema

    base = {"base": BaseSchema, "nanoaod": NanoAODSchema}[schema]
    if not options:
        return base
    # The subclass keeps the base's name: coffea and users' messages show the schema they
    # chose.
    return type(base.__name__, (base,), {"__module__": base.__module__, **dict(options)})


def schema_mismatch(url: str, tree: str, schema: str, options: SchemaOptions = ()) -> str | None:
    """Why the tree ``tree`` of the file ``url`` does not fit ``schema`` with ``options``, in
    one line; None where it does. Cheap: it builds the NanoEvents of the first entries, which
    reads the tree's metadata (the branches and their types) and no event data, and is where
    coffea's schemas refuse a file (a NanoAOD file without its event ids, a collection whose
    branches do not line up). ``OSError`` where the file cannot be opened."""

    if schema == "none":
        return None
    cls = schema_class(schema, options)
    with open_remote(url) as f:
        try:
            t = _tree(f, url, tree)
        except EventsError as exc:
            return str(exc)
        if schema == "nanoaod" and cls.error_missing_event_ids:
            names = set(t.keys(recursive=False))
            missing = [name for name in cls.event_ids if name not in names]
            if missing:
                return (
                    f"{url} (tree {tree}) has no branch {', '.join(missing)}, which "
                    f"NanoAODSchema requires as event ids (or set schema_options: "
                    f"{{error_missing_event_ids: false}}, or use schema: base)"
                )
        try:
            from coffea.nanoevents import NanoEventsFactory

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # what the workers will warn of, once each
                events = NanoEventsFactory.from_root(
                    f,
                    treepath=tree,
                    mode="virtual",
                    entry_start=0,
                    entry_stop=min(int(t.num_entries), 1),
                    schemaclass=cls,
                ).events()
                events.fields  # noqa: B018 (the form is built: nothing read)
        except Exception as exc:
            text = " ".join(str(exc).split())[:300] or type(exc).__name__
            return f"{url} (tree {tree}) does not fit coffea's {cls.__name__}: {text}"
    return None


def _nanoevents(
    f: Any, url: str, t: Any, tree: str, read: ReadSpec, start: int, stop: int, log: list[Any]
) -> Any:
    from coffea.nanoevents import NanoEventsFactory

    schema = schema_class(read.schema, read.schema_options)
    metadata = nanoevents_metadata(read, url, tree, start, stop, str(f.file.uuid))
    options: dict[str, Any] = {}
    if read.columns is not None:
        options["filter_name"] = list(read.columns)
    factory = NanoEventsFactory.from_root(
        f,
        treepath=tree,
        mode="virtual",
        entry_start=start,
        entry_stop=stop,
        schemaclass=schema,
        metadata=metadata,
        access_log=log,
        iteritems_options=options,
    )
    return factory.events()


def _parquet(path: str, url: str, read: ReadSpec, start: int, stop: int) -> Opened:
    import awkward as ak

    cols = list(read.columns) if read.columns is not None else None
    arr = ak.from_parquet(path, columns=cols)
    n = len(arr)
    if stop > n:
        raise EventsError(f"{url}: entries [{start}, {stop}) outside the file's {n}")
    return _ParquetOpened(arr[start:stop], None, start, stop, [])


class _ParquetOpened(Opened):
    __slots__ = ()

    def bytes_read(self) -> int:
        return int(self.events.nbytes)
