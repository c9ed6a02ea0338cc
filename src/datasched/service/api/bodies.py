"""Bodies read within bounds: no call makes the daemon hold more of a body than its limit.

:class:`BoundedBodies` is an ASGI middleware around the whole application. A body declared
larger than the call's limit (``Content-Length``) is answered 413 before anything reads it;
one sent without a length (chunked) is counted as it arrives and stopped with a 413 as soon
as it passes the limit (:class:`BodyTooLarge`, raised from ``receive``). Whenever an answer
leaves part of a body unread (a 413, a 401 before the body, a refusal), the answer says
``Connection: close``, so the server closes the connection instead of reading the rest to
find the next request. The submission route reads its body as a stream with the same limit
(docs/service.md, "Limits").
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import HTTPException

__all__ = ["BodyTooLarge", "BoundedBodies", "too_large"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

CLOSE = (b"connection", b"close")


def too_large(limit: int) -> dict[str, Any]:
    """The 413 answer's body."""
    return {"errors": [{"field": "body", "reason": f"larger than the limit of {limit} bytes"}]}


class BodyTooLarge(HTTPException):
    """A body past its limit, found while reading it: a 413 that closes the connection."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, detail=too_large(limit), headers={"Connection": "close"})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


class BoundedBodies:
    """Bound every request body: ``limit_for(method, path)`` gives the largest body a call
    may send, in bytes."""

    def __init__(self, app: App, limit_for: Callable[[str, str], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(str(scope.get("method", "")), str(scope.get("path", "")))
        length = _header(scope, b"content-length")
        declared = int(length) if length is not None and length.strip().isdigit() else None
        if declared is not None and declared > limit:
            await _answer_413(send, limit)
            return
        chunked = _header(scope, b"transfer-encoding") is not None
        state = {"received": 0, "done": not (chunked or (declared or 0) > 0)}

        async def bounded_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                if not message.get("more_body", False):
                    state["done"] = True
                if state["received"] > limit:
                    raise BodyTooLarge(limit)
            return message

        async def closing_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not state["done"]:
                headers = list(message.get("headers", ()))
                if CLOSE not in [(k.lower(), v.lower()) for k, v in headers]:
                    message = {**message, "headers": [*headers, CLOSE]}
            await send(message)

        await self.app(scope, bounded_receive, closing_send)


async def _answer_413(send: Send, limit: int) -> None:
    body = json.dumps(too_large(limit), separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                CLOSE,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
