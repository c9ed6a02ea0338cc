"""The program inside a sandbox: loads one job's processor and runs it on the packets its
host sends, or merges results, answering over the socket it was given.

``python -I -m datasched.sandbox.child FD``: ``FD`` is its end of the host's socket. Each
request is one message (:mod:`~datasched.sandbox.wire`):

* ``load`` (payload: the processor file's text): compile and load the processor, instantiate
  its class with the job's arguments;
* ``packet`` (one descriptor: the packet's file, read-only): run the processor on entries
  ``[start, stop)``; the answer's payload is the accumulator pickled here (cloudpickle: the
  user's classes travel with it), opaque to the host;
* ``merge`` (payload: results, each framed by its length): the merge of them, coffea's rules,
  then the processor's ``postprocess`` if asked (``final``);
* ``check``: ``load``, then nothing: the processor loads and takes its arguments;
* ``count`` (one descriptor): the entries of a tree in a ROOT file, which the daemon's
  checks need of a file the catalog does not know.

Every answer is ``{"ok": true, ...}`` or ``{"ok": false, "kind": ..., "message": ...,
"traceback": ...}``. The host decides what to believe of it.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["main", "split_blobs"]

MAX_REQUEST = 1 << 30
"""The largest request payload the child reads (results to merge)."""
KEEP_FDS = 32
"""Files the child keeps open between packets (one descriptor per file)."""
_LENGTH = struct.Struct("!Q")


def split_blobs(payload: bytes) -> Iterator[bytes]:
    """The results framed in a ``merge`` payload (each an 8-byte length then its bytes)."""
    at = 0
    while at < len(payload):
        (n,) = _LENGTH.unpack_from(payload, at)
        at += _LENGTH.size
        if at + n > len(payload):
            raise ValueError("a merge payload cut short")
        yield payload[at : at + n]
        at += n


def join_blobs(blobs: list[bytes]) -> bytes:
    """The ``merge`` payload of ``blobs``."""
    return b"".join(_LENGTH.pack(len(b)) + b for b in blobs)


class _Files:
    """The packets' files, one descriptor kept per file (by device and inode), so that a
    file's next packet finds it at the same ``/proc/self/fd`` path and the runtime's pool of
    open files (:mod:`~datasched.runtime.events`) keeps its parsed tree."""

    def __init__(self) -> None:
        self._by_inode: OrderedDict[tuple[int, int], int] = OrderedDict()

    def path(self, fd: int) -> str:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        kept = self._by_inode.get(key)
        if kept is not None:
            os.close(fd)
            self._by_inode.move_to_end(key)
            return f"/proc/self/fd/{kept}"
        self._by_inode[key] = fd
        while len(self._by_inode) > KEEP_FDS:
            _, old = self._by_inode.popitem(last=False)
            from datasched.runtime.events import forget_open_files

            forget_open_files(f"/proc/self/fd/{old}")
            os.close(old)
        return f"/proc/self/fd/{fd}"


class _Child:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.proc: Any = None
        self.name = ""
        self.files = _Files()

    def answer(self, header: dict[str, Any], payload: bytes = b"") -> None:
        from datasched.sandbox import wire

        wire.send(self.sock, header, payload)

    def fail(self, kind: str, message: str, traceback: str = "") -> None:
        self.answer({"ok": False, "kind": kind, "message": message, "traceback": traceback})

    def load(self, header: dict[str, Any], payload: bytes) -> None:
        from datasched.runtime.processor import (
            ProcessorError,
            load_processor,
            load_processor_source,
        )

        ref = str(header["ref"])
        args = json.loads(str(header.get("args", "{}")))
        try:
            if header.get("filename"):
                self.proc = load_processor_source(ref, str(header["filename"]), payload, args)
            else:
                self.proc = load_processor(ref, Path.cwd(), args)
        except ProcessorError as exc:
            self.fail("processor", str(exc), exc.traceback)
            return
        self.name = ref
        self.answer(
            {"ok": True, "has_postprocess": callable(getattr(self.proc, "postprocess", None))}
        )

    def packet(self, header: dict[str, Any], fds: list[int]) -> None:
        import cloudpickle

        from datasched.runtime.compute import PacketError, run_processor
        from datasched.runtime.events import ReadSpec

        url = str(header["url"])
        if self.proc is None or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            self.fail("processor", "no processor loaded, or no file given")
            return
        read = header.get("read") or {}
        spec = ReadSpec(
            str(read.get("dataset", "")),
            dict(read.get("metadata") or {}),
            str(read.get("schema", "none")),
            tuple(read["columns"]) if read.get("columns") is not None else None,
            tuple((str(k), v) for k, v in read.get("schema_options") or ()),
        )
        path = self.files.path(fds[0])
        try:
            acc, n_bytes, open_s, compute_s = run_processor(
                self.proc,
                self.name,
                path,
                url,
                str(header["tree"]),
                spec,
                int(header["start"]),
                int(header["stop"]),
            )
            blob = cloudpickle.dumps(acc)
        except PacketError as exc:
            self.fail(exc.kind, exc.message, exc.traceback)
            return
        except Exception as exc:  # the accumulator does not pickle
            self.fail("processor", f"the result cannot be pickled: {type(exc).__name__}: {exc}")
            return
        self.answer(
            {"ok": True, "bytes_read": n_bytes, "open_s": open_s, "compute_s": compute_s}, blob
        )

    def count(self, header: dict[str, Any], fds: list[int]) -> None:
        """The entries of a tree in the file handed over: what the daemon's check needs of a
        file the catalog does not know, without parsing a user's file itself."""
        import uproot

        url, tree = str(header["url"]), str(header["tree"])
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            self.fail("data", "no file given")
            return
        try:
            with uproot.open(f"/proc/self/fd/{fds[0]}") as f:
                if tree not in f:
                    names = sorted(
                        {k.split(";")[0] for k, c in f.classnames().items() if c == "TTree"}
                    )
                    has = f"its trees: {', '.join(names)}" if names else "it holds no tree"
                    self.fail("data", f"{url}: no tree {tree!r} ({has})")
                    return
                obj = f[tree]
                if not hasattr(obj, "num_entries"):
                    self.fail("data", f"{url}: {tree!r} is a {f.classname_of(tree)}, not a tree")
                    return
                n = int(obj.num_entries)
        except Exception as exc:
            self.fail("data", f"{url}: not a readable ROOT file: {exc}")
            return
        finally:
            os.close(fds[0])
        self.answer({"ok": True, "n_events": n})

    def merge(self, header: dict[str, Any], payload: bytes) -> None:
        import pickle

        import cloudpickle

        from datasched.runtime.outputs import merge
        from datasched.runtime.processor import user_traceback

        try:
            merged = None
            for blob in split_blobs(payload):
                merged = merge(merged, pickle.loads(blob))
            post = getattr(self.proc, "postprocess", None)
            if header.get("final") and callable(post):
                done = post(merged)
                merged = merged if done is None else done
            self.answer({"ok": True}, cloudpickle.dumps(merged))
        except Exception as exc:
            message = f"the results cannot be merged: {type(exc).__name__}: {exc}"
            self.fail("processor", message, user_traceback(exc))

    def serve(self) -> None:
        from datasched.sandbox import wire

        while True:
            try:
                header, payload, fds = wire.recv(self.sock, max_payload=MAX_REQUEST, max_fds=1)
            except wire.WireError:
                return  # the host is gone
            op = header.get("op")
            if op in ("load", "check"):
                self.load(header, payload)
            elif op == "packet":
                self.packet(header, fds)
            elif op == "merge":
                self.merge(header, payload)
            elif op == "count":
                self.count(header, fds)
            else:
                self.fail("host", f"unknown request {op!r}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(args[0]))
    started = time.perf_counter()
    child = _Child(sock)
    child.answer({"ok": True, "ready": True, "pid": os.getpid(), "start_s": started})
    child.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
