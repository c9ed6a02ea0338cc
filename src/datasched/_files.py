"""Writing files so that nothing half-written is ever left behind."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["atomic_write_text"]


def atomic_write_text(path: Path, write: Callable[[IO[str]], object] | str) -> None:
    """Write a text file through a temporary file beside it, renamed into place when complete.

    ``write`` is the text, or a function writing it to the open file. Missing parent
    directories are created.

    The temporary file is created with ``open(..., "x")`` rather than ``mkstemp``, so the
    result gets the permissions the user's umask gives any new file (mkstemp's are 0600).
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tmp.open("x", newline="") as fh:
            if isinstance(write, str):
                fh.write(write)
            else:
                write(fh)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
