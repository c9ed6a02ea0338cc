"""Private temporary directories: made with an owner, removed without following links,
and those of dead processes removed by the next process that makes one (docs/security.md,
"Scratch directories"). Three kinds are made so (:data:`PREFIXES`): a sandbox's scratch
(``datasched-job-``), a confined Dask worker's temporary directory (``datasched-worker-``)
and a cluster's TLS credentials (``datasched-tls-``, private keys that must not outlive a
killed daemon).

Each directory ``datasched-job-NAME`` has a lock file beside it,
``datasched-job-NAME.lock``, which the process that made it holds locked (``flock``) until
it removes both. The kernel releases the lock when that process dies, however it dies
(killed, out of memory), so a lock that can be taken is a scratch whose owner is gone: the
first scratch a process makes in a directory (and one an hour after) first removes those
(:func:`sweep_scratch`). A live one's lock cannot be taken, from this process or another.

What is removed is only what this code made: a lock file of this process's account (the
job's account cannot make one for root), and beside it a real directory (not a link) of the
account its lock file names. The directory's contents are the job's, who may have planted
links or closed directories in it: removal goes by file descriptor, never follows a link
(a link is removed, not what it points to), and opens directories the job closed when the
job's account is this process's own. A scratch without a lock file (made by an older
datasched) is never touched.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from datasched.sandbox.confine import Confinement, account

__all__ = [
    "PREFIX",
    "PREFIXES",
    "TLS_PREFIX",
    "WORKER_PREFIX",
    "make_scratch",
    "remove_scratch",
    "sweep_scratch",
]

PREFIX = "datasched-job-"
"""A sandbox's scratch directory's name starts so."""
WORKER_PREFIX = "datasched-worker-"
"""A confined Dask worker's temporary directory's name starts so."""
TLS_PREFIX = "datasched-tls-"
"""A cluster's private TLS credentials' directory's name starts so."""
PREFIXES = (PREFIX, WORKER_PREFIX, TLS_PREFIX)
"""Every kind of directory made here; a sweep removes the dead ones of them all."""
LOCK_SUFFIX = ".lock"
SWEEP_EVERY_S = 3600.0
"""A process sweeps a directory of scratches again when it makes one there this long after
its last sweep (a daemon that runs for months outlives many workers)."""
_LOCK_NAME = re.compile(
    "(?:" + "|".join(map(re.escape, PREFIXES)) + r")[A-Za-z0-9_]+" + re.escape(LOCK_SUFFIX)
)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(slots=True)
class _Held:
    """A scratch of this process: its lock file's descriptor (holding the lock) and the
    process that made it (a forked child does not own its parent's)."""

    fd: int
    pid: int


_lock = threading.Lock()
_held: dict[Path, _Held] = {}
_swept: dict[tuple[Path, int], float] = {}


def _clear_after_fork() -> None:
    """A forked child owns none of its parent's scratches: it forgets them (closing its
    copies of the descriptors releases nothing while the parent holds its own)."""
    global _lock
    _lock = threading.Lock()
    for held in _held.values():
        with contextlib.suppress(OSError):
            os.close(held.fd)
    _held.clear()
    _swept.clear()


os.register_at_fork(after_in_child=_clear_after_fork)


def make_scratch(
    conf: Confinement | None,
    base: str | Path | None = None,
    *,
    prefix: str = PREFIX,
    with_tmp: bool = True,
) -> Path:
    """A new private directory (mode 0700, with ``tmp/`` in it unless not ``with_tmp``)
    in ``base`` (the temporary
    directory if None), named ``prefix`` and a random part (one of :data:`PREFIXES`), owned
    by the job's account of ``conf`` when this process is root (None: this process's own),
    locked as this process's until :func:`remove_scratch`. The first in ``base`` (and one an
    hour after) first removes those there of processes that died."""
    if prefix not in PREFIXES:
        raise ValueError(f"prefix: {prefix!r} is not one of {', '.join(PREFIXES)}")
    where = Path(base if base is not None else tempfile.gettempdir()).absolute()
    uid = gid = None
    if os.geteuid() == 0 and conf is not None and conf.run_as is not None:
        uid, gid = account(conf.run_as)
    _forget_removed()
    key = (where, os.getpid())
    with _lock:
        due = time.monotonic() - _swept.get(key, -SWEEP_EVERY_S) >= SWEEP_EVERY_S
        if due:
            _swept[key] = time.monotonic()
    if due:
        sweep_scratch(where)
    for _ in range(100):
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
        fd = _lock_for(path, os.geteuid() if uid is None else uid)
        if fd is None:  # the name's lock file was there, or a sweep took it first
            _remove_at(str(where), path.name)
            continue
        try:
            made = [path]
            if with_tmp:
                (path / "tmp").mkdir()
                made.append(path / "tmp")
            if uid is not None and gid is not None:
                for p in made:
                    os.chown(p, uid, gid)
        except BaseException:
            with _lock:
                _held[path] = _Held(fd, os.getpid())
            remove_scratch(path)
            raise
        with _lock:
            _held[path] = _Held(fd, os.getpid())
        return path
    raise FileExistsError(errno.EEXIST, "no free name for a scratch directory", str(where))


def _lock_for(path: Path, owner: int) -> int | None:
    """The descriptor of ``path``'s new lock file, locked, naming this process and the
    directory's owner ``owner``; None if the name is taken or a sweep took the lock before
    this process did (the file is then no longer at its name)."""
    lock_path = f"{path}{LOCK_SUFFIX}"
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(lock_path, flags, 0o600)
    except FileExistsError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not _still_at(fd, lock_path):
            os.close(fd)
            return None
        os.write(fd, f"{os.getpid()} {owner}\n".encode())
    except BaseException:
        os.close(fd)
        raise
    return fd


def _still_at(fd: int, path: str, dir_fd: int | None = None) -> bool:
    """Whether the file open as ``fd`` is still the one at ``path``."""
    try:
        there = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return os.path.samestat(there, os.fstat(fd))


def remove_scratch(path: str | Path) -> bool:
    """Remove a scratch directory this process made (:func:`make_scratch`), then its lock
    file, never following a link the job planted in it. Whether it is gone; if it is not
    (files the job made that this account cannot remove), its lock file stays, released,
    for a later sweep. Removing it twice, or one not made here, does nothing."""
    path = Path(path)
    with _lock:
        held = _held.pop(path, None)
    if held is None:
        return not path.exists()
    try:
        gone = _remove_at(str(path.parent), path.name)
        if gone:
            lock_path = f"{path}{LOCK_SUFFIX}"
            if _still_at(held.fd, lock_path):
                with contextlib.suppress(OSError):
                    os.unlink(lock_path)  # noqa: PTH108  # the same calls as the sweep's
        return gone
    finally:
        os.close(held.fd)


def _forget_removed() -> None:
    """Release the locks of this process's scratches that something else removed (a caller
    that removed the directory itself): their lock files would otherwise stay held."""
    with _lock:
        gone = [p for p in _held if not p.exists()]
    for p in gone:
        remove_scratch(p)


@atexit.register
def _remove_all() -> None:
    """At exit, this process's scratches that are left (the sandboxes that used them are
    closed first, :mod:`~datasched.sandbox.host`)."""
    with _lock:
        mine = [p for p, h in _held.items() if h.pid == os.getpid()]
    for p in mine:
        remove_scratch(p)


def sweep_scratch(base: str | Path | None = None) -> int:
    """Remove the scratch directories in ``base`` (the temporary directory if None) whose
    owner died: a lock file of this account that can be locked, and beside it a directory
    (not a link) of the account the lock file names. How many were removed."""
    where = str(base if base is not None else tempfile.gettempdir())
    try:
        base_fd = os.open(where, _DIR_FLAGS)
    except OSError:
        return 0
    removed = 0
    try:
        with os.scandir(base_fd) as entries:
            names = [e.name for e in entries if _LOCK_NAME.fullmatch(e.name)]
        for name in names:
            removed += _sweep_one(base_fd, name)
    finally:
        os.close(base_fd)
    return removed


def _sweep_one(base_fd: int, lock_name: str) -> int:
    """Remove the scratch of the lock file ``lock_name`` if its owner is gone (1), else
    leave it (0)."""
    try:
        fd = os.open(lock_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=base_fd)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return 0  # not a lock file this account made
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # its owner lives
        if not _still_at(fd, lock_name, base_fd):
            return 0  # removed meanwhile by another sweep
        owners = {os.geteuid()}
        said = os.read(fd, 64).split()
        if len(said) >= 2 and said[1].isdigit():
            owners.add(int(said[1]))
        name = lock_name.removesuffix(LOCK_SUFFIX)
        try:
            top = os.stat(name, dir_fd=base_fd, follow_symlinks=False)
        except FileNotFoundError:
            top = None
        if top is not None:
            if not stat.S_ISDIR(top.st_mode) or top.st_uid not in owners:
                return 0  # not what this code made: left alone
            if not _remove_at(base_fd, name):
                return 0
        os.unlink(lock_name, dir_fd=base_fd)
        return 1 if top is not None else 0
    except OSError:
        return 0
    finally:
        os.close(fd)


def _remove_at(parent: int | str, name: str) -> bool:
    """Remove the entry ``name`` of the directory ``parent`` (a descriptor or a path) and
    all it holds, by descriptor, never following a symbolic link: a link is removed, not
    what it points to. Whether it is gone."""
    opened = isinstance(parent, str)
    try:
        parent_fd = os.open(parent, _DIR_FLAGS) if isinstance(parent, str) else parent
    except OSError:
        return False
    try:
        return _remove_tree(parent_fd, name)
    finally:
        if opened:
            os.close(parent_fd)


def _open_dir(parent_fd: int, name: str) -> int | None:
    """A descriptor of the directory ``name`` in ``parent_fd`` (None: it is not a directory,
    a link included), writable and readable by this account if it owns it (a job may close
    its own directories; root needs no permission)."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except PermissionError:
        if os.geteuid() == 0:
            raise
        # Closed to this account: opened as a path alone, its mode set through it.
        handle = os.open(name, _DIR_FLAGS | os.O_PATH, dir_fd=parent_fd)
        try:
            if os.fstat(handle).st_uid != os.geteuid():
                raise
            os.chmod(f"/proc/self/fd/{handle}", stat.S_IRWXU)  # noqa: PTH101  # by descriptor
        finally:
            os.close(handle)
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except (NotADirectoryError, OSError) as exc:
        if isinstance(exc, NotADirectoryError) or exc.errno == errno.ELOOP:
            return None
        raise
    if os.geteuid() != 0:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and st.st_mode & stat.S_IRWXU != stat.S_IRWXU:
            os.fchmod(fd, stat.S_IRWXU)
    return fd


def _entries(fd: int) -> Iterator[os.DirEntry[str]]:
    """The entries of the directory ``fd``, listed at once (the listing is not held open
    while they are removed)."""
    with os.scandir(fd) as listing:
        return iter(list(listing))


def _remove_tree(parent_fd: int, name: str) -> bool:
    """:func:`_remove_at` on a descriptor: depth first, one open directory a level, no
    recursion (a job may nest its directories deep)."""
    try:
        top = _open_dir(parent_fd, name)
        if top is None:
            os.unlink(name, dir_fd=parent_fd)
            return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
    ok = True
    stack: list[tuple[int, str, int, Iterator[os.DirEntry[str]]]] = []
    try:
        stack.append((parent_fd, name, top, _entries(top)))
    except OSError:
        os.close(top)
        return False
    while stack:
        up, dir_name, fd, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            os.close(fd)
            try:
                os.rmdir(dir_name, dir_fd=up)
            except FileNotFoundError:
                pass
            except OSError:
                ok = False
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                sub = _open_dir(fd, entry.name)
                if sub is not None:
                    try:
                        stack.append((fd, entry.name, sub, _entries(sub)))
                    except OSError:
                        os.close(sub)
                        raise
                    continue
            os.unlink(entry.name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError:
            ok = False
    return ok
