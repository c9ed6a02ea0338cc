"""The semantic checks of a parsed request (the paper's "semantic rules"): every input
resolves to files (in the catalog or on storage under the configured roots), the command or
the processor resolves, and every location written lies under the roots and can be written.

User code is never run here. A processor is checked by looking: a ``file.py`` must exist
under a root, a module must be found on the import path (found, not imported: its parent
packages are searched as directories), and the attribute must be a name. The checks that need
the code itself are a ``code_check`` given by the caller: the daemon's loads the processor in
a sandbox (:class:`datasched.service.usercode.SandboxCheck`); ``datasched request check
--load`` loads it on the user's own machine.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from datasched.service.contracts import (
    CatalogLookup,
    CommandWork,
    FieldError,
    FileRef,
    InputSpec,
    MetaJobRequest,
    ProcessorWork,
)
from datasched.service.request.fields import FILELIST, processor_ref_problem
from datasched.service.request.paths import (
    Outside,
    confine,
    confine_output,
    expand,
    is_remote,
    readable_for,
    resolve_roots,
    writable_problem,
)

__all__ = [
    "COMMAND_VARIABLES",
    "PATH_VARIABLES",
    "CodeCheck",
    "EventCounter",
    "check_request",
]

CodeCheck = Callable[[ProcessorWork], FieldError | None]
"""A check of a processor that needs its code (it loads, its class takes the arguments),
run where user code may run: a sandbox (:class:`datasched.service.usercode.SandboxCheck`)."""
EventCounter = Callable[[str, str | None], int]
"""Counts the events of a file on storage that the catalog does not know: ``(url, tree)``;
raises ``ValueError`` saying why it cannot."""

_NAMES = r"FILELIST|JOBID|REQUESTID|PROCESSID|USER|SCRATCH|INPUTFILECOUNT|INPUTFILE\d+"
COMMAND_VARIABLES = re.compile(rf"\$(?:\{{(?:{_NAMES})\}}|(?:{_NAMES}))")
"""The scheduler's variables a command's arguments may hold (STAR's): the runner puts in the
file list's path, the elementary job's id, its input files, its scratch directory and its
owner."""
PATH_VARIABLES = {"JOBID": "x_0", "REQUESTID": "x", "PROCESSID": "0", "USER": "user"}
"""The variables an output path may hold (what the runner knows before the job runs), with
the stand-ins the check puts in to look at the path."""
_PATH_VARIABLE = re.compile(r"\$\{?([A-Z][A-Z0-9]*)\}?")
_OPERATORS = frozenset("();<>|&")
MAX_FILELIST_BYTES = 4 << 20


class _Check:
    def __init__(
        self,
        catalog: CatalogLookup | None,
        roots: Sequence[Path],
        count_events: EventCounter | None,
        tree: str | None,
        max_files: int,
        needs_events: bool,
        user: str | None = None,
        user_dirs: bool = False,
    ) -> None:
        self.user = user
        self.user_dirs = user_dirs
        self.catalog = catalog
        self.roots = roots
        self.count_events = count_events
        self.tree = tree
        self.max_files = max_files
        self.needs_events = needs_events
        self.errors: list[FieldError] = []

    def add(self, field: str, reason: str) -> None:
        self.errors.append(FieldError(field, reason))

    # -- inputs ---------------------------------------------------------------------------

    def input(self, spec: InputSpec, field: str) -> list[FileRef]:
        if spec.catalog is not None:
            files = self.query(spec.catalog, f"{field}.catalog")
        elif spec.path is not None and spec.path.startswith(FILELIST):
            files = self.filelist(spec.path[len(FILELIST) :], f"{field}.path")
        elif spec.path is not None:
            files = self.path(spec.path, f"{field}.path")
        else:
            self.add(field, "names no file: expected a path or a catalog query")
            return []
        if spec.n_files is not None:
            files = files[: spec.n_files]
        if spec.machine is not None:
            # The paper's machine: the node whose disk holds these files.
            files = [
                FileRef(
                    f.url,
                    f.n_events,
                    f.n_bytes,
                    f.tree,
                    f.dataset,
                    (spec.machine, *(n for n in f.cached_on if n != spec.machine)),
                )
                for f in files
            ]
        return files

    def query(self, query: str, field: str) -> list[FileRef]:
        if self.catalog is None:
            self.add(field, "no catalog is configured to answer a query")
            return []
        try:
            files = self.catalog.query(query)
        except ValueError as exc:
            self.add(field, str(exc))
            return []
        if not files:
            self.add(field, f"no file in the catalog matches {query!r}")
        return list(files)

    def shareable(self, path: Path) -> Path:
        """``path`` if this request's jobs may read it (:func:`readable_for`)."""
        return readable_for(path, self.roots, self.user if self.user_dirs else None)

    def filelist(self, path: str, field: str) -> list[FileRef]:
        try:
            listing = self.shareable(confine(path, self.roots))
        except Outside as exc:
            self.add(field, f"file list: {exc}")
            return []
        if not listing.is_file():
            self.add(field, f"file list: no such file {listing}")
            return []
        try:
            if listing.stat().st_size > MAX_FILELIST_BYTES:
                self.add(field, f"file list: larger than {MAX_FILELIST_BYTES} bytes")
                return []
            lines = listing.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeError) as exc:
            self.add(field, f"file list: cannot read {listing}: {exc}")
            return []
        files: list[FileRef] = []
        for n, line in enumerate(lines, start=1):
            entry = line.strip()
            if entry and not entry.startswith("#"):
                files.extend(self.path(entry, field, where=f"{listing} line {n}: "))
        if not files and not any(e.field == field for e in self.errors):
            self.add(field, f"file list {listing} names no file")
        return files

    def path(self, path: str, field: str, *, where: str = "") -> list[FileRef]:
        if is_remote(path):
            known = self.catalog.file(path) if self.catalog is not None else None
            if known is None:
                self.add(
                    field, f"{where}{path} is not in the catalog (storage URLs are catalogued)"
                )
                return []
            return [known]
        try:
            if any(c in path for c in "*?["):
                found = expand(path, self.roots, limit=self.max_files)
                if not found:
                    self.add(field, f"{where}no file matches {path}")
            else:
                found = [confine(path, self.roots)]
        except Outside as exc:
            self.add(field, f"{where}{exc}")
            return []
        files = []
        for p in found:
            ref = self.file(p, field, where)
            if ref is not None:
                files.append(ref)
        return files

    def file(self, path: Path, field: str, where: str) -> FileRef | None:
        known = self.catalog.file(str(path)) if self.catalog is not None else None
        if known is not None:
            return known  # catalogued by the administrators: shared data
        try:
            self.shareable(path)
        except Outside as exc:
            self.add(field, f"{where}{exc}")
            return None
        try:
            info = path.stat()
        except OSError:
            info = None
        if info is None or not stat.S_ISREG(info.st_mode):
            self.add(field, f"{where}no such file {path} (neither in the catalog nor on storage)")
            return None
        n_events = 0
        if self.count_events is None and self.needs_events:
            self.add(
                field,
                f"{where}{path} is not in the catalog, and a processor needs its events "
                "counted: catalog it first",
            )
            return None
        if self.count_events is not None and self.needs_events:
            try:
                n_events = self.count_events(str(path), self.tree)
            except ValueError as exc:
                self.add(field, f"{where}{exc}")
                return None
        return FileRef(str(path), n_events, info.st_size, self.tree)

    # -- work -----------------------------------------------------------------------------

    def processor(self, work: ProcessorWork) -> None:
        ref = work.processor
        problem = processor_ref_problem(ref)
        if problem:
            self.add("processor", problem)
            return
        target, sep, _attr = ref.strip().rpartition(":")
        if not sep:
            target = ref.strip()
        if target.endswith(".py"):
            self.processor_file(target)
        elif not _module_found(target, self.roots):
            self.add("processor", f"no module {target!r} on the import path or under the roots")

    def processor_file(self, target: str) -> Path | None:
        candidates = (
            [target] if Path(target).is_absolute() else [str(r / target) for r in self.roots]
        )
        for candidate in candidates or [target]:
            try:
                path = confine(candidate, self.roots)
                if path.is_file():
                    return self.shareable(path)
            except Outside as exc:
                self.add("processor", f"{target}: {exc}")
                return None
        self.add("processor", f"no file {target} under the configured roots")
        return None

    def command(self, work: CommandWork, allow_shell: bool, search_path: str | None) -> None:
        command = work.command
        if "\n" in command or "\r" in command:
            self.add("command", "one command line (put a script in a file under a root)")
            return
        try:
            lexer = shlex.shlex(command, posix=True, punctuation_chars="();<>|&")
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError as exc:
            self.add("command", f"cannot be split into words: {exc}")
            return
        if not tokens:
            self.add("command", "an empty command")
            return
        if not allow_shell:
            ops = sorted({t for t in tokens if t and set(t) <= _OPERATORS})
            if ops or any("`" in t for t in tokens):
                shown = " ".join(ops) or "`"
                self.add("command", f"shell operators ({shown}) are not allowed: no shell runs it")
            elif any("$" in COMMAND_VARIABLES.sub("", t) for t in tokens):
                self.add(
                    "command",
                    "only the scheduler's variables $FILELIST, $INPUTFILECOUNT, $INPUTFILEn, "
                    "$SCRATCH, $JOBID, $REQUESTID, $PROCESSID and $USER are filled in "
                    "(no shell runs it)",
                )
        for token in tokens[1:]:
            # A file under a root named as an argument is bound in the command's sandbox.
            if token.startswith("/") and "$" not in token:
                try:
                    named = confine(token, self.roots)
                except Outside:
                    continue  # not under a root (the system's, or no roots): not bound
                try:
                    self.shareable(named)
                except Outside as exc:
                    self.add("command", f"{token}: {exc}")
        exe = shlex.split(command)[0] if allow_shell else tokens[0]
        if "/" in exe:
            try:
                path = self.shareable(confine(exe, self.roots))
            except Outside as exc:
                self.add("command", f"{exe}: {exc}")
                return
            if not path.is_file() or not os.access(path, os.X_OK):
                self.add("command", f"{path} is not an executable file")
        elif shutil.which(exe, path=search_path) is None:
            self.add("command", f"{exe!r} is not found on the PATH")

    # -- locations ------------------------------------------------------------------------

    def readable(self, where: str, field: str) -> None:
        try:
            path = self.shareable(confine(where, self.roots))
        except Outside as exc:
            self.add(field, str(exc))
            return
        if not path.is_file() or not os.access(path, os.R_OK):
            self.add(field, f"{path} is not a readable file")

    def writable(self, where: str, field: str) -> None:
        if is_remote(where):
            self.add(field, f"{where}: outputs go to a local path under the configured roots")
            return
        unknown = sorted({m for m in _PATH_VARIABLE.findall(where) if m not in PATH_VARIABLES})
        if unknown:
            known = ", ".join(f"${v}" for v in PATH_VARIABLES)
            self.add(field, f"${unknown[0]} is not filled in in an output path (only {known})")
            return
        values = {**PATH_VARIABLES, "USER": self.user or "user"}
        looked = _PATH_VARIABLE.sub(lambda m: values.get(m.group(1), m.group(0)), where)
        try:
            path = confine_output(looked, self.roots, self.user if self.user_dirs else None)
        except Outside as exc:
            self.add(field, str(exc))
            return
        problem = writable_problem(path)
        if problem:
            self.add(field, problem)


def _module_found(dotted: str, roots: Sequence[Path]) -> bool:
    """Whether ``dotted`` is a module on the import path or under a root, found without
    importing anything (not even its parent packages)."""
    parts = dotted.split(".")
    try:
        spec = importlib.util.find_spec(parts[0]) if parts[0] not in sys.modules else None
        if spec is None and parts[0] in sys.modules:
            spec = sys.modules[parts[0]].__spec__
        if spec is None:
            spec = importlib.machinery.PathFinder.find_spec(parts[0], [str(r) for r in roots])
        for i in range(1, len(parts)):
            locations = spec.submodule_search_locations if spec is not None else None
            if not locations:
                return False
            spec = importlib.machinery.PathFinder.find_spec(
                ".".join(parts[: i + 1]), list(locations)
            )
    except (ImportError, ValueError):
        return False
    return spec is not None


def check_request(
    mjr: MetaJobRequest,
    catalog: CatalogLookup | None,
    *,
    roots: Sequence[Path],
    allow_shell: bool = False,
    search_path: str | None = None,
    count_events: EventCounter | None = None,
    max_files: int = 100_000,
    user_dirs: bool = False,
    code_check: CodeCheck | None = None,
) -> tuple[list[FileRef], list[FieldError]]:
    """The request's files (each once, in the order its inputs name them) and every problem
    found. ``roots``: the directories a request may read and write under (the first is where
    relative paths start). ``allow_shell``: commands may be shell
    lines. ``search_path``: the PATH commands are looked up on (None: this process's).
    ``count_events``: counts the events of a processor's file that the catalog does not
    know (None: such a file is refused); a command's files need no count (0).
    ``user_dirs``: outputs go under the request's user's own directory of a root (a daemon
    of several users). ``code_check``: the check that needs the processor's code, run (in a
    sandbox) only once everything else holds."""
    tree = mjr.work.tree if isinstance(mjr.work, ProcessorWork) else None
    needs_events = isinstance(mjr.work, ProcessorWork)
    check = _Check(
        catalog,
        resolve_roots(roots),
        count_events,
        tree,
        max_files,
        needs_events,
        user=mjr.username or None,
        user_dirs=user_dirs,
    )
    files: list[FileRef] = []
    seen: set[str] = set()
    for i, spec in enumerate(mjr.inputs):
        for ref in check.input(spec, f"input[{i}]"):
            if ref.url not in seen:
                seen.add(ref.url)
                files.append(ref)
    if len(files) > max_files:
        check.add("input", f"at most {max_files} files, got {len(files)}")
    work = mjr.work
    if isinstance(work, ProcessorWork):
        check.processor(work)
    else:
        check.command(work, allow_shell, search_path)
        if work.stdin is not None:
            check.readable(work.stdin, "stdin")
        for key in ("stdout", "stderr"):
            where = getattr(work, key)
            if where is not None:
                check.writable(where, key)
    if mjr.output is not None:
        check.writable(mjr.output, "output")
    if not check.errors and code_check is not None and isinstance(work, ProcessorWork):
        problem = code_check(work)
        if problem is not None:
            check.errors.append(problem)
    return files, check.errors
