"""How a packet's events are read on a worker: flat awkward arrays or coffea's NanoEvents,
reading only the branches the processor uses.

* ``schema: none`` (the default): a flat awkward array of the tree's branches (or of those
  named by ``columns``, names or globs), read with uproot as *virtual* arrays: a branch is
  read when the processor first touches it, so projection needs no list.
* ``schema: base`` or ``nanoaod``: NanoEvents built by coffea's factory in its virtual mode
  (the ``coffea`` extra), with ``events.metadata`` holding the dataset, the file's URL, the
  tree, the entry range and the file's UUID, as coffea's Runner gives them, and the
  dataset's own metadata.

Either way the packet reports the bytes it read: the stored size of the baskets of the
branches it touched that overlap its entries (what uproot reads and decompresses).

Opening a file costs a packet more than its events may: uproot reads the tree's header, one
object per branch (0.7 s for the 947 branches of a NanoAOD file). So each worker thread keeps
its last two files open, keyed by path, size, inode and modification time (a file fetched
again is a new key), and the packets of one file pay that price once per thread.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uproot

__all__ = [
    "SCHEMAS",
    "EventsError",
    "ReadSpec",
    "branch_bytes",
    "forget_open_files",
    "open_events",
    "trees_in",
]

SCHEMAS = ("none", "base", "nanoaod")
"""How a job sees its events: flat arrays, or coffea's NanoEvents with its BaseSchema or
NanoAODSchema."""


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


OPEN_PER_THREAD = 2
"""Files each worker thread keeps open (a packet stream reads one file, then the next)."""

_local = threading.local()


def _open_file(path: str) -> tuple[Any, bool]:
    """The uproot file at ``path``, opened by this thread or kept open from its last use, and
    whether it is kept (a local file) or to be closed after use (a URL read in place)."""
    if "://" in path and not path.startswith("file://"):
        return uproot.open(path), False
    st = os.stat(path.removeprefix("file://"))
    key = (path, st.st_size, st.st_ino, st.st_mtime_ns)
    opened: OrderedDict[tuple[Any, ...], Any] | None = getattr(_local, "files", None)
    if opened is None:
        opened = _local.files = OrderedDict()
    f = opened.get(key)
    if f is not None:
        opened.move_to_end(key)
        return f, True
    f = uproot.open(path)
    opened[key] = f
    while len(opened) > OPEN_PER_THREAD:
        _, old = opened.popitem(last=False)
        old.close()
    return f, True


def forget_open_files() -> None:
    """Close the files this thread keeps open (a corrupted copy is about to be dropped)."""
    opened = getattr(_local, "files", None)
    while opened:
        _, f = opened.popitem()
        f.close()


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
    try:
        f, kept = _open_file(path)
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
    except BaseException:
        forget_open_files()
        if not kept:
            f.close()
        raise
    try:
        yield Opened(events, t, start, stop, log)
    finally:
        if not kept:
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


def _nanoevents(
    f: Any, url: str, t: Any, tree: str, read: ReadSpec, start: int, stop: int, log: list[Any]
) -> Any:
    from coffea.nanoevents import BaseSchema, NanoAODSchema, NanoEventsFactory

    schema = {"base": BaseSchema, "nanoaod": NanoAODSchema}[read.schema]
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
