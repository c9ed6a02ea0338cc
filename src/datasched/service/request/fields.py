"""What the XML and YAML forms of a request share: the error collector, the checks of single
values (counts, the split strategy, a processor's reference, processor arguments) and how
locations are written (``file:`` URLs, the paper's ``path`` + ``name``)."""

from __future__ import annotations

import posixpath
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from datasched.service.contracts import FieldError, RequestInvalid, SplitStrategy

__all__ = [
    "ARG_TYPES",
    "FILELIST",
    "Errors",
    "is_control",
    "join_location",
    "parse_catalog_url",
    "processor_ref_problem",
    "strip_file_scheme",
]

FILELIST = "filelist:"
"""An input path with this prefix names a file that lists the input files, one a line (the
paper's ``<input name= path=>``; STAR's ``filelist:`` URLs)."""

ARG_TYPES: Mapping[str, type] = {"str": str, "int": int, "float": float, "bool": bool}
"""The types a processor argument may have (XML's ``<arg type=...>``; YAML scalars)."""

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def is_control(c: str, *, allowed: str = "") -> bool:
    """A control character, a lone surrogate or a non-character (none of which XML can
    hold), unless in ``allowed``."""
    if c in allowed:
        return False
    return unicodedata.category(c) in ("Cc", "Cs") or c in "\ufffe\uffff"


class Errors:
    """Collects every problem of one request, so that all are reported at once."""

    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, field: str, reason: str) -> None:
        self.items.append(FieldError(field, reason))

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise RequestInvalid(self.items)

    def positive_int(self, field: str, value: Any) -> int | None:
        """``value`` as an int >= 1 (it may be written as text), or None with an error."""
        if isinstance(value, bool):
            self.add(field, f"expected an integer >= 1, got {value!r}")
            return None
        if isinstance(value, str):
            text = value.strip()
            if not text.isascii() or not text.isdigit() or len(text) > 12:
                self.add(field, f"expected an integer >= 1, got {value!r}")
                return None
            value = int(text)
        if not isinstance(value, int) or value < 1:
            self.add(field, f"expected an integer >= 1, got {value!r}")
            return None
        return value

    def split(self, field: str, value: Any) -> SplitStrategy | None:
        try:
            return SplitStrategy(value)
        except ValueError:
            known = ", ".join(s.value for s in SplitStrategy)
            self.add(field, f"expected one of {known}, got {value!r}")
            return None

    def name(self, field: str, value: Any, *, what: str) -> str | None:
        """A short name (user, group, policy): non-empty text without spaces or controls."""
        if not isinstance(value, str) or not value or len(value) > 128:
            self.add(field, f"expected a {what} (1 to 128 characters), got {value!r}")
            return None
        if any(c.isspace() or not c.isprintable() for c in value):
            self.add(field, f"a {what} holds no spaces or control characters, got {value!r}")
            return None
        return value

    def text(self, field: str, value: Any, *, limit: int = 4096) -> str:
        """Free text (title, description): printable, at most ``limit`` characters."""
        if not isinstance(value, str):
            self.add(field, f"expected text, got {value!r}")
            return ""
        if len(value) > limit:
            self.add(field, f"at most {limit} characters, got {len(value)}")
            return ""
        if any(is_control(c, allowed="\n\t") for c in value):
            self.add(field, "holds control characters")
            return ""
        return value

    def location(self, field: str, value: Any) -> str | None:
        """A path or URL (an input, an output, stdout): text without controls."""
        if not isinstance(value, str) or not value.strip():
            self.add(field, f"expected a path or URL, got {value!r}")
            return None
        if len(value) > 4096 or any(is_control(c) for c in value):
            self.add(field, "a path or URL of at most 4096 printable characters")
            return None
        return value.strip()

    def processor(self, field: str, value: Any) -> str | None:
        if not isinstance(value, str):
            self.add(field, f"expected module:attr or file.py:attr, got {value!r}")
            return None
        problem = processor_ref_problem(value)
        if problem:
            self.add(field, problem)
            return None
        return value.strip()

    def arg(self, field: str, value: Any) -> Any:
        """A processor argument: a string, an int, a float or a bool (the XML form has no
        other types, and the two forms must mean the same)."""
        if isinstance(value, str) and any(is_control(c, allowed="\n\t") for c in value):
            self.add(field, "holds control characters")
            return None
        if isinstance(value, str | int | float | bool):
            return value
        self.add(field, f"expected a string, number or boolean, got {type(value).__name__}")
        return None


def processor_ref_problem(ref: str) -> str | None:
    """What is wrong with a processor reference's syntax (None: nothing): ``module:attr``
    (dotted module, dotted attribute) or ``file.py:attr`` (``file.py`` alone means its
    ``processor``, as ``datasched run``). Nothing is imported here."""
    ref = ref.strip()
    target, sep, attr = ref.rpartition(":")
    if not sep:
        target, attr = ref, ""
    if target.endswith(".py"):
        if not attr:
            attr = "processor"
    elif not target or not attr:
        return f"expected module:attr or file.py:attr, got {ref!r}"
    elif not all(_IDENT.match(p) for p in target.split(".")):
        return f"{target!r} is not a module name"
    if not all(_IDENT.match(p) for p in attr.split(".")):
        return f"{attr!r} is not an attribute name"
    if any(is_control(c) for c in target):
        return "the file name holds control characters"
    return None


def strip_file_scheme(url: str) -> str:
    """``file:/a/b`` and ``file:///a/b`` as ``/a/b``; anything else unchanged."""
    if url.startswith("file://"):
        return url[len("file://") :]
    if url.startswith("file:"):
        return url[len("file:") :]
    return url


def join_location(path: str | None, name: str | None) -> str | None:
    """The paper's ``path`` (a directory) and ``name`` (a file in it) as one path."""
    if path and name:
        return posixpath.join(path.strip(), name.strip())
    return (path or name or "").strip() or None


def parse_catalog_url(url: str) -> str:
    """A ``catalog:`` URL's query in datasched's words: ``catalog:year=2004 system=AuAu``
    stays as it is; STAR's ``catalog:star.bnl.gov?year=2004,system=AuAu`` (a host, then
    comma-separated conditions) becomes ``year=2004 system=AuAu``."""
    query = url[len("catalog:") :].strip()
    if "?" in query:
        query = query.split("?", 1)[1]
        query = " ".join(p.strip() for p in query.split(",") if p.strip())
    return query
