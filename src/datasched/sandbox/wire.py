"""The messages between a sandboxed child and its host, over a Unix stream socket.

A message is a header (a JSON object) and a payload (bytes, possibly none), framed as two
8-byte lengths then both; open files travel beside the first bytes (``SCM_RIGHTS``): the host
hands the child a packet's input file as a descriptor, so the child sees that file and no
other. The host reads what a child sends as hostile: every length is bounded before anything
is read, the header must be a JSON object, and a descriptor sent by a child is closed unread.
Nothing here unpickles.
"""

from __future__ import annotations

import array
import json
import os
import socket
import struct
from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_HEADER", "WireError", "recv", "send"]

_LENGTHS = struct.Struct("!QQ")
MAX_HEADER = 1 << 20
"""The largest header either side reads (a traceback fits many times over)."""


class WireError(ConnectionError):
    """The other side closed the socket, or sent something that is not a message."""


def send(
    sock: socket.socket, header: dict[str, Any], payload: bytes = b"", fds: Sequence[int] = ()
) -> None:
    """Send one message (``fds`` beside its first bytes)."""
    head = json.dumps(header, separators=(",", ":")).encode()
    prefix = _LENGTHS.pack(len(head), len(payload))
    if fds:
        sock.sendmsg(
            [prefix], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        )
    else:
        sock.sendall(prefix)
    sock.sendall(head)
    if payload:
        sock.sendall(payload)


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        got = sock.recv(min(n - len(chunks), 1 << 20))
        if not got:
            raise WireError("the other side closed the connection")
        chunks += got
    return bytes(chunks)


def recv(
    sock: socket.socket, *, max_payload: int, max_fds: int = 0
) -> tuple[dict[str, Any], bytes, list[int]]:
    """One message: ``(header, payload, fds)``. At most ``max_fds`` descriptors are kept
    (any more are closed); a header past :data:`MAX_HEADER` or a payload past
    ``max_payload`` bytes is a :class:`WireError`, before it is read."""
    fds: list[int] = []
    size = array.array("i").itemsize
    prefix, ancillary, _, _ = sock.recvmsg(_LENGTHS.size, socket.CMSG_SPACE(max(max_fds, 1) * size))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            got = array.array("i")
            got.frombytes(data[: len(data) - len(data) % size])
            fds.extend(got)
    extra, fds = fds[max_fds:], fds[:max_fds]
    for fd in extra:
        os.close(fd)
    try:
        if not prefix:
            raise WireError("the other side closed the connection")
        if len(prefix) < _LENGTHS.size:
            prefix += _exactly(sock, _LENGTHS.size - len(prefix))
        n_head, n_payload = _LENGTHS.unpack(prefix)
        if n_head > MAX_HEADER:
            raise WireError(f"a header of {n_head} bytes (at most {MAX_HEADER})")
        if n_payload > max_payload:
            raise WireError(f"a payload of {n_payload} bytes (at most {max_payload})")
        try:
            header = json.loads(_exactly(sock, n_head))
        except ValueError as exc:
            raise WireError(f"a header that is not JSON: {exc}") from None
        if not isinstance(header, dict):
            raise WireError("a header that is not a JSON object")
        return header, _exactly(sock, n_payload), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
