"""The API's error answers as OpenAPI sees them: every error is ``{"errors": [{"field",
"reason"}]}`` (the ``Errors`` schema), and :func:`error_responses` declares, per operation,
the statuses it can answer with their meaning (docs/service.md, "The API")."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["ERROR_STATUSES", "Errors", "FieldError", "Refused", "error_responses"]


class FieldError(BaseModel):
    """One problem: the field it is about (a header, a parameter, a path into the request)
    and the reason, in words."""

    field: str = Field(description="What the problem is about: `body`, `Authorization`, ...")
    reason: str = Field(description="What is wrong, in one line.")


class Errors(BaseModel):
    """Every error answer of the API."""

    errors: list[FieldError]


class Refused(Errors):
    """A request refused as invalid: kept (``id``, state ``refused``) so that its owner can
    read why; ``id`` is null when the body was not even text."""

    id: str | None = None
    state: str | None = Field(default=None, examples=["refused"])


ERROR_STATUSES: dict[int, str] = {
    400: "a parameter that cannot be used (the field says which)",
    401: "no valid token (`Authorization: Bearer TOKEN`); answered with `WWW-Authenticate`",
    403: "administrators only",
    404: "no such request, or another user's (the same answer)",
    409: "the state does not allow it (a result of a request not completed, or of classes "
    "the daemon does not unpickle, or packets' results past the daemon's limit)",
    413: "the body is larger than the limit (the connection is closed)",
    415: "the Content-Type is neither XML nor YAML",
    422: "invalid: every field found wrong, with the reason",
    429: "too many calls (field `rate`), too many requests not yet final (field "
    "`pending`), or a what-if while the caller's last is under way (field `whatif`); "
    "answered with `Retry-After` (seconds)",
    500: "the daemon's own state is inconsistent (the field says where)",
    503: "the part needed is not there (the request language, the live cluster state)",
}

_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "`Bearer`: the scheme to authenticate with",
            "schema": {"type": "string"},
        }
    },
    409: {
        "Retry-After": {
            "description": "Seconds to wait, while a request's results are being merged",
            "schema": {"type": "integer"},
        }
    },
    429: {
        "Retry-After": {
            "description": "Seconds to wait before trying again",
            "schema": {"type": "integer"},
        }
    },
}


def error_responses(*statuses: int, refused: bool = False) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of an operation answering ``statuses``, each with the ``Errors``
    schema (its 422 with ``Refused`` when ``refused``)."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {
            "model": Refused if refused and status == 422 else Errors,
            "description": ERROR_STATUSES[status],
        }
        if status in _HEADERS:
            entry["headers"] = _HEADERS[status]
        out[status] = entry
    return out
