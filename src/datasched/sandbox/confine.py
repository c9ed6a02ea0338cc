"""The confinement of a user's code: what it may see, as whom it runs, and its limits.

A job's code runs in a sandbox made by bubblewrap (``bwrap``): new user, mount, PID, IPC,
UTS and (unless an administrator allows it) network namespaces, a clean environment, a file
system of its own that holds the system's programs and libraries, the Python environment
datasched runs in, the job's inputs (read-only) and a scratch directory, and nothing else: no
view of the store, of the daemon's files, of the workers' caches or of other jobs. Inside, a
small launcher sets the limits (address space, CPU time, processes, file size) before the
user's code starts; the host enforces the wall time.

As whom: an unprivileged process (a worker) makes the sandbox in a user namespace of its own,
so the code runs as that process's account. A process running as root (the daemon checking a
processor, a worker started as root) never runs user code as root: it first makes a view of
the same paths, traversable by the job's account, switches to that account with ``setpriv``
(no capabilities, no new privileges), and makes the sandbox from there. The limit on
processes counts only the processes of the job's own user namespace.

Without bubblewrap (``Confinement(bwrap=False)``, ``datasched serve --no-sandbox``: a single
user's own machine) the code still runs in a child process with a clean environment and the
limits on memory, CPU time and file size, never in the process that asked; but it sees what
its account sees.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import site
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path

__all__ = [
    "IDLE_S",
    "JOB_PATH",
    "KEEP",
    "SCRATCH",
    "Confinement",
    "Layout",
    "LimitReached",
    "SandboxUnavailable",
    "UserCode",
    "account",
    "clean_env",
    "command_line",
    "limit_reason",
    "python_dirs",
    "sandbox_problem",
    "view_args",
]

GiB = 1 << 30
IDLE_S = 60.0
"""How long a worker keeps a sandboxed child idle before it closes it (the pool's default).
Here, beside the confinement and free of the pool's dependencies, because the daemon's ETAs
read it (``datasched.service.warm_sandboxes``) where only the service's extra is installed."""
KEEP = 4
"""How many idle sandboxed children a worker keeps (:class:`~datasched.sandbox.pool.ChildPool`):
past it the least recently used is closed, and its user's next packet there starts a new one.
The service's ETAs read it (docs/service-whatif.md)."""
SCRATCH = "/scratch"
"""The job's scratch directory inside the sandbox: its working directory, ``$HOME`` and
``$SCRATCH`` (``/tmp`` is a directory of it too)."""
JOB_PATH = "/usr/local/bin:/usr/bin:/bin"
"""``$PATH`` inside the sandbox."""
INSTALL_HINT = (
    "install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora, RHEL: "
    "dnf install bubblewrap), or, on a single user's own machine only, run with --no-sandbox"
)


class SandboxUnavailable(RuntimeError):
    """User code cannot be confined here; the message says why and what to do."""


class LimitReached(RuntimeError):
    """A job's code passed one of its limits; the message names it."""


@dataclass(frozen=True, slots=True)
class Confinement:
    """How a job's code is confined (plain data: it travels to the workers with the work).

    ``bwrap``: in a bubblewrap sandbox (False: a plain child process, for one user's own
    machine); ``run_as``: the account the code runs as when the process starting it is root
    (never root itself); ``network``: whether the code may use the network; the limits, per
    job: ``memory_bytes`` (each process's address space), ``cpu_s`` (CPU seconds; the runner
    also sums them over the job's packets), ``wall_s`` (seconds from the job's first packet),
    ``processes`` (at once, in the job's sandbox) and ``file_bytes`` (the largest file it
    writes, its standard output included)."""

    bwrap: bool = True
    run_as: str | None = None
    network: bool = False
    memory_bytes: int = 4 * GiB
    cpu_s: float = 24 * 3600.0
    wall_s: float = 24 * 3600.0
    processes: int = 256
    file_bytes: int = 16 * GiB

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "cpu_s", "wall_s", "processes", "file_bytes"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name}: must be positive, got {value!r}")
        if self.memory_bytes < 256 << 20:
            raise ValueError(
                f"memory_bytes: at least 256 MB (Python and its libraries), got {self.memory_bytes}"
            )
        if self.run_as is not None and not self.run_as.strip():
            raise ValueError("run_as: an account's name, not empty")

    def rlimits(self) -> dict[str, int]:
        """The limits the launcher sets inside the sandbox (``resource`` names)."""
        limits = {
            "RLIMIT_AS": int(self.memory_bytes),
            "RLIMIT_CPU": max(int(self.cpu_s + 0.999), 1),
            "RLIMIT_FSIZE": int(self.file_bytes),
            "RLIMIT_CORE": 0,
        }
        if self.bwrap:  # counted in the sandbox's own user namespace only
            limits["RLIMIT_NPROC"] = int(self.processes)
        return limits


@dataclass(frozen=True, slots=True)
class UserCode:
    """A processor as data: the user's reference to it (``file.py:attr`` or
    ``module:attr``), the text of its file read as bytes (None: a module installed where the
    workers run), the file's path (shown in tracebacks), its constructor's arguments as
    JSON, and the user whose job runs it (``owner``). It is only ever compiled and run inside
    a sandbox."""

    ref: str
    source: bytes | None = None
    filename: str | None = None
    args_json: str = "{}"
    owner: str = ""
    """The user whose job loads it. A child keeps what its packets leave behind (the
    processor's state, the descriptors of the files it read), so children are shared only
    among one owner's jobs: another user's job with the same code never gets one."""

    @property
    def key(self) -> str:
        """Equal for the same code, arguments and owner: children are shared by it."""
        h = sha256()
        for part in (self.ref, self.filename or "", self.args_json, self.owner):
            h.update(part.encode() + b"\0")
        h.update(self.source or b"")
        return h.hexdigest()[:24]

    def __repr__(self) -> str:
        size = f"{len(self.source)} bytes" if self.source is not None else "a module"
        return f"UserCode({self.ref!r}, {size})"


@dataclass(frozen=True, slots=True)
class Layout:
    """What the sandbox holds beside the system and Python: ``ro`` and ``rw`` binds
    ``(host path, path inside)``, the host's scratch directory (bound at :data:`SCRATCH`) and
    the environment (besides ``PATH``, ``HOME``, ``LANG``, ``SCRATCH``)."""

    scratch: Path
    ro: tuple[tuple[str, str], ...] = ()
    rw: tuple[tuple[str, str], ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


# -- the account --------------------------------------------------------------------------


def account(name: str) -> tuple[int, int]:
    """``(uid, gid)`` of the account ``name``; ``ValueError`` naming it if there is none."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(
            f"run_as: no account {name!r} on this machine (create one without privileges: "
            f"useradd --system --no-create-home --shell /usr/sbin/nologin {name})"
        ) from None
    if entry.pw_uid == 0:
        raise ValueError(f"run_as: {name!r} is root; jobs run as an account without privileges")
    return entry.pw_uid, entry.pw_gid


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment a job's code gets: ``PATH``, ``HOME``, ``LANG`` and
    ``SCRATCH``, then ``extra`` (STAR's variables); nothing of the process that starts it."""
    env = {"PATH": JOB_PATH, "HOME": SCRATCH, "LANG": "C.UTF-8", "SCRATCH": SCRATCH}
    env.update(extra or {})
    return env


# -- what the sandbox holds ---------------------------------------------------------------


@functools.cache
def python_dirs() -> tuple[str, ...]:
    """The directories of the Python environment datasched runs in (prefixes, site
    packages, datasched's own source), outermost first: bound read-only in every sandbox."""
    import datasched

    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    found += site.getsitepackages()
    found.append(str(Path(datasched.__file__).resolve().parent.parent))
    dirs: list[str] = []
    for d in sorted({os.path.realpath(p) for p in found if os.path.isdir(p)}, key=len):
        if not any(d == k or d.startswith(k.rstrip("/") + "/") for k in dirs):
            dirs.append(d)
    # The interpreter a virtual environment links to lies in its base prefix (bound above).
    return tuple(dirs)


def _system_args() -> list[str]:
    """The system's programs, libraries and configuration, read-only (``/usr``, and
    ``/bin``, ``/lib`` ... as the links or directories they are here; ``/etc``)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return [*args, "--ro-bind", "/etc", "/etc"]


SHM = ["--perms", "1777", "--tmpfs", "/dev/shm"]
"""POSIX shared memory (multiprocessing's locks and queues need it), of the sandbox alone."""


class _Mounts:
    """bwrap arguments binding paths at the same or other places, each parent directory
    made first and traversable (mode 0755), so that an account without privileges reaches a
    bound path even when its host parents (``/root``) are closed to it."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self._dirs: set[str] = {"/"}
        self._bound: list[str] = ["/usr", "/etc", "/proc", "/dev"]

    def _parents(self, dest: str) -> None:
        parts = Path(dest).parts[1:-1]
        at = "/"
        for part in parts:
            at = os.path.join(at, part)
            if at in self._dirs or any(at.startswith(b + "/") or at == b for b in self._bound):
                continue
            self.args += ["--perms", "0755", "--dir", at]
            self._dirs.add(at)

    def bind(self, src: str, dest: str, *, writable: bool = False) -> None:
        covered = any(dest == b or dest.startswith(b.rstrip("/") + "/") for b in self._bound)
        if covered and not writable:
            return  # already visible, read-only, through a bind above it
        self._parents(dest)
        self.args += ["--bind" if writable else "--ro-bind", src, dest]
        self._bound.append(dest)


def _namespaces(conf: Confinement) -> list[str]:
    args = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try", "--disable-userns", "--hostname", "sandbox"]
    if not conf.network:
        args.append("--unshare-net")
    return [*args, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


def inner_args(conf: Confinement, layout: Layout) -> list[str]:
    """bwrap's arguments for the sandbox itself (made by an unprivileged process)."""
    m = _Mounts()
    for d in python_dirs():
        m.bind(d, d)
    for src, dest in layout.ro:
        m.bind(src, dest)
    m.bind(str(layout.scratch), SCRATCH, writable=True)
    for src, dest in layout.rw:
        m.bind(src, dest, writable=True)
    args = ["bwrap", *_namespaces(conf), *_system_args(), "--proc", "/proc", "--dev", "/dev"]
    args += SHM
    # /tmp first: a file bound below it (an argument's) must not be hidden by it.
    args += ["--bind", str(layout.scratch / "tmp"), "/tmp", *m.args, "--chdir", SCRATCH]
    args.append("--clearenv")
    for key, value in clean_env(layout.env).items():
        args += ["--setenv", key, value]
    return args


def outer_args(conf: Confinement, layout: Layout) -> list[str]:
    """A root process's way in: a view of what the sandbox binds, each path at its own place
    and reachable, then ``setpriv`` to the job's account."""
    if conf.run_as is None:
        raise SandboxUnavailable(
            "as root, user code runs only as an account without privileges: give --run-as "
            "(e.g. useradd --system --no-create-home datasched-job, then --run-as datasched-job)"
        )
    ro = [src for src, _ in layout.ro]
    rw = [str(layout.scratch), *(src for src, _ in layout.rw)]
    return view_args(conf.run_as, ro=ro, rw=rw)


def view_args(
    run_as: str,
    *,
    ro: Iterable[str] = (),
    rw: Iterable[str] = (),
    tmp: str | None = None,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """bwrap's arguments for a root process to start something as ``run_as``: a mount
    namespace holding the system, the Python environment, ``ro`` (read-only) and ``rw``
    (writable) at their own paths, each reachable through traversable parents (``/root``
    may be closed to the account), ``/tmp`` (a tmpfs, or ``tmp`` bound there), the host's
    ``/proc`` (so that a sandbox inside may mount its own) and a clean environment (``PATH``
    and ``env``); then ``setpriv`` to the account, without capabilities or new privileges.
    The command follows."""
    uid, gid = account(run_as)
    m = _Mounts()
    for d in python_dirs():
        m.bind(d, d)
    # Outer paths first: a path bound inside another stays in view (not hidden under it).
    wanted = [(d, False) for d in ro] + [(d, True) for d in rw]
    for d, writable in sorted(wanted, key=lambda w: len(Path(w[0]).parts)):
        m.bind(d, d, writable=writable)
    args = ["bwrap", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session"]
    args += [*_system_args(), "--bind", "/proc", "/proc", "--dev", "/dev", *SHM]
    args += ["--bind", tmp, "/tmp"] if tmp is not None else ["--tmpfs", "/tmp"]
    args += [*m.args, "--clearenv", "--setenv", "PATH", JOB_PATH]
    for key, value in (env or {}).items():
        args += ["--setenv", key, value]
    # The parent-death signal is cleared when the account changes: set again, so that what
    # runs as the account dies with bubblewrap (and bubblewrap with its parent).
    args += ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    args += ["--pdeathsig", "SIGKILL"]
    return [*args, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


LAUNCHER = (
    "import json,os,resource,sys\n"
    "for k,v in json.loads(sys.argv[1]).items():\n"
    " resource.setrlimit(getattr(resource,k),(v,v+5 if k=='RLIMIT_CPU' else v))\n"
    "os.umask(0o077)\n"
    "os.execvp(sys.argv[2],sys.argv[2:])\n"
)
"""Sets the limits inside the sandbox (after its user namespace exists: the processes limit
then counts only the sandbox's processes), then becomes the job's program. The CPU limit's
hard value is 5 s past its soft one, so that a job past it gets SIGXCPU (which says why)
before SIGKILL."""


def command_line(conf: Confinement, layout: Layout, argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` confined by ``conf``: in a sandbox holding
    ``layout`` (through a root process's view when this process is root), or, without
    bubblewrap, as a plain child (the caller gives it :func:`clean_env`). The limits are set
    inside, before ``argv`` starts."""
    limits = json.dumps(conf.rlimits())
    launched = [sys.executable, "-I", "-S", "-c", LAUNCHER, limits, *argv]
    if not conf.bwrap:
        return launched
    problem = sandbox_problem()
    if problem is not None:
        raise SandboxUnavailable(problem)
    inner = [*inner_args(conf, layout), *launched]
    if os.geteuid() != 0:
        if conf.run_as is not None and account(conf.run_as)[0] != os.geteuid():
            raise SandboxUnavailable(
                f"run_as: cannot run as {conf.run_as!r} from the account "
                f"{pwd.getpwuid(os.geteuid()).pw_name!r}: only root switches accounts (start "
                f"the workers as {conf.run_as!r})"
            )
        return inner
    return [*outer_args(conf, layout), *inner]


# -- is it there ----------------------------------------------------------------------------


@functools.cache
def sandbox_problem() -> str | None:
    """Why user code cannot be confined here (None: it can): bubblewrap is missing, or
    cannot make namespaces. Checked once a process, by making one."""
    exe = shutil.which("bwrap")
    if exe is None:
        return f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}"
    try:
        probe = subprocess.run(
            [
                exe,
                "--unshare-all",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--die-with-parent",
                "true",
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot be started: {exc}"
    if probe.returncode != 0:
        said = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        return (
            f"bubblewrap cannot make a sandbox here ({said[-1] if said else probe.returncode}): "
            "unprivileged user namespaces may be disabled (sysctl "
            "kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)"
        )
    return None


def limit_reason(conf: Confinement, *, exit_code: int | None, cpu_s: float, said: str = "") -> str:
    """Which limit a child that ended badly most likely passed, in words ("" if none):
    its CPU time against ``cpu_s``, a signal of CPU or file-size limits, a ``MemoryError``."""
    signal = -exit_code if exit_code is not None and exit_code < 0 else None
    if signal is None and exit_code is not None and exit_code > 128:
        signal = exit_code - 128  # bubblewrap reports a signal as 128 + its number
    if signal == 24 or cpu_s >= conf.cpu_s * 0.98:  # SIGXCPU
        return f"the job's CPU time limit ({conf.cpu_s:g} s) was reached"
    if signal == 25:  # SIGXFSZ
        return f"the job's file size limit ({conf.file_bytes / GiB:g} GiB) was reached"
    if "MemoryError" in said or "Cannot allocate memory" in said:
        return f"the job's memory limit ({conf.memory_bytes / GiB:g} GiB a process) was reached"
    if "Resource temporarily unavailable" in said or "Cannot fork" in said:
        return f"the job's process limit ({conf.processes}) was reached"
    return ""
