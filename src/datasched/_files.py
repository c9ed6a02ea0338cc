"""Writing files so that nothing half-written is ever left behind.

Every finished file the package writes goes through :func:`atomic_path`: the new content is
written under a temporary name beside the target and renamed onto it only when complete, so
the target is always either the old file or the whole new one. :func:`atomic_write_text` and
:func:`atomic_write_bytes` cover writers given an open file; ``atomic_path`` itself serves
those that need a file name (uproot).

Not covered, on purpose: data copies streamed into a ``.part`` file and renamed by the
runtime's storage and disk cache. There the ``.part`` name is fixed and meaningful (a peer
waits on it, a restarted cache deletes it) and the copy is checked before the rename.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text"]


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write the new file to; renamed onto ``path`` when
    the block ends normally, removed (and the error propagated) when it raises.

    Missing parent directories are created. The temporary name holds a random token, so it is
    unique per call: concurrent writers of one file (threads saving an index) never share a
    temporary file, and the last rename wins.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield tmp
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, write: Callable[[IO[str]], object] | str) -> None:
    """Write a text file through a temporary file beside it, renamed into place when complete.

    ``write`` is the text, or a function writing it to the open file. Missing parent
    directories are created.

    The temporary file is created with ``open(..., "x")`` rather than ``mkstemp``, so the
    result gets the permissions the user's umask gives any new file (mkstemp's are 0600).
    """
    with atomic_path(path) as tmp, tmp.open("x", newline="") as fh:
        if isinstance(write, str):
            fh.write(write)
        else:
            write(fh)


def atomic_write_bytes(
    path: Path, write: Callable[[IO[bytes]], object] | bytes, *, fsync: bool = False
) -> None:
    """:func:`atomic_write_text` for a binary file: ``write`` is the bytes, or a function
    writing them to the open file. ``fsync``: flush the data to disk before the rename (for
    results that must survive a crash, not just an error)."""
    with atomic_path(path) as tmp, tmp.open("xb") as fh:
        if isinstance(write, bytes):
            fh.write(write)
        else:
            write(fh)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())


def write_csv_and_png(
    out_dir: Path,
    key: str,
    rows: Sequence[Mapping[str, object]],
    png: Callable[[], bytes],
    columns: Sequence[str] | None = None,
) -> tuple[Path, Path]:
    """A figure's data and picture: ``<key>.csv`` (``columns``, else every key of ``rows``
    in first-seen order; no header without rows) and ``<key>.png`` (``png()``'s bytes), each
    written whole, in ``out_dir`` (made if missing). Returns the two paths."""
    import csv
    import io

    out_dir.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    names = (
        list(columns) if columns is not None else list(dict.fromkeys(k for r in rows for k in r))
    )
    if names:
        writer = csv.DictWriter(buf, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)
    csv_path, png_path = out_dir / f"{key}.csv", out_dir / f"{key}.png"
    atomic_write_text(csv_path, buf.getvalue())
    atomic_write_bytes(png_path, png())
    return csv_path, png_path
