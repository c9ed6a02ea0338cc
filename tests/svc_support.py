"""Stand-ins for the service's parts built elsewhere, for the service's tests: a request
language (a small YAML form, enough to drive the store, the API and the daemon) and a
runner (a thread that "processes" each job's files packet by packet and can die mid-way).

The real ones are :mod:`datasched.service.request` and :mod:`datasched.service.runner`;
these fakes live in tests/ only.
"""

from __future__ import annotations

import pickle
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import yaml

from datasched.runtime.outputs import merge_all
from datasched.service.catalog import Catalog
from datasched.service.contracts import (
    CatalogLookup,
    CommandWork,
    ElementaryJob,
    FieldError,
    FileRef,
    InputSpec,
    JobState,
    MetaJobRequest,
    PacketDone,
    ProcessorWork,
    RequestInvalid,
    RunnerListener,
    SplitStrategy,
)
from datasched.service.store.db import Store
from datasched.service.users import add_user


class FakeLanguage:
    """Requests as YAML: ``{username, title, processor | command, input: [url | {catalog:
    query}], files_per_job}``; XML is refused (not this fake's job)."""

    def parse(self, text: str, content_type: str, username: str) -> MetaJobRequest:
        if content_type != "yaml":
            raise RequestInvalid([FieldError("body", "the test language reads YAML only")])
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise RequestInvalid([FieldError("body", f"not YAML: {exc}")]) from exc
        if not isinstance(doc, Mapping):
            raise RequestInvalid([FieldError("body", "expected a mapping")])
        errors = []
        if "command" in doc:
            work: ProcessorWork | CommandWork = CommandWork(str(doc["command"]))
        elif "processor" in doc:
            work = ProcessorWork(str(doc["processor"]))
        else:
            errors.append(FieldError("process", "give processor or command"))
            work = ProcessorWork("none")
        inputs = []
        raw_inputs = doc.get("input") or []
        if not isinstance(raw_inputs, list):
            errors.append(FieldError("input", "expected a list"))
            raw_inputs = []
        for i, item in enumerate(raw_inputs):
            if isinstance(item, str):
                inputs.append(InputSpec(path=item))
            elif isinstance(item, Mapping) and "catalog" in item:
                inputs.append(InputSpec(catalog=str(item["catalog"])))
            else:
                errors.append(FieldError(f"input[{i}]", "expected a path or {catalog: query}"))
        if not inputs:
            errors.append(FieldError("input", "missing"))
        files_per_job = doc.get("files_per_job", 1)
        if not isinstance(files_per_job, int) or isinstance(files_per_job, bool):
            errors.append(FieldError("files_per_job", "expected a whole number"))
        if errors:
            raise RequestInvalid(errors)
        return MetaJobRequest(
            username=str(doc.get("username", username)),
            work=work,
            inputs=tuple(inputs),
            title=str(doc.get("title", "")),
            max_files_per_job=files_per_job,
            group=str(doc["group"]) if "group" in doc else None,
        )

    def _files(self, request: MetaJobRequest, catalog: CatalogLookup) -> list[FileRef]:
        files: list[FileRef] = []
        errors = []
        for i, spec in enumerate(request.inputs):
            if spec.catalog is not None:
                try:
                    found = catalog.query(spec.catalog)
                except ValueError as exc:
                    errors.append(FieldError(f"input[{i}].catalog", str(exc)))
                    continue
                files.extend(found)
            else:
                ref = catalog.file(str(spec.path))
                if ref is None:
                    errors.append(
                        FieldError(f"input[{i}].path", f"{spec.path}: not in the catalog")
                    )
                else:
                    files.append(ref)
        if errors:
            raise RequestInvalid(errors)
        return files

    def check(self, request: MetaJobRequest, catalog: CatalogLookup) -> list[FileRef]:
        return self._files(request, catalog)

    def split(
        self,
        request: MetaJobRequest,
        request_id: str,
        files: Sequence[FileRef],
        strategy: SplitStrategy,
    ) -> list[ElementaryJob]:
        n = request.max_files_per_job or 1
        return [
            ElementaryJob(
                request_id, k, tuple(files[i : i + n]), request.work, user=request.username
            )
            for k, i in enumerate(range(0, len(files), n))
        ]


class Died(Exception):
    """The fake runner's crash."""


class FakeRunner:
    """Runs each job in a thread of its own: packets of ``packet`` entries over its files
    (skipping the ranges done), each reported with the pickled result ``{"events": n}``;
    ``die_after`` packets in all, it stops reporting (a crash mid-way)."""

    def __init__(
        self,
        *,
        packet: int = 10,
        die_after: int | None = None,
        delay_s: float = 0.0,
        replay: bool = False,
        hold_users: frozenset[str] = frozenset(),
    ):
        self.hold_users = hold_users
        """Whose jobs wait, running, until cancelled."""
        self.packet, self.die_after, self.delay_s = packet, die_after, delay_s
        self.replay = replay
        """Run the ranges done again too (a runner that replays after a crash)."""
        self.listener: RunnerListener | None = None
        self.submitted: list[tuple[str, list[tuple[str, int, int]]]] = []
        self.cancelled: list[str] = []
        self.merged: list[int] = []
        """The number of results of each merge asked for."""
        self.reported = 0
        self.dead = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self, listener: RunnerListener) -> None:
        self.listener = listener

    def submit(self, job: ElementaryJob, done_ranges: Sequence[tuple[str, int, int]]) -> None:
        self.submitted.append((job.id, list(done_ranges)))
        t = threading.Thread(target=self._run, args=(job, list(done_ranges)), daemon=True)
        self._threads.append(t)
        t.start()

    def _report(self, packet: PacketDone) -> None:
        with self._lock:
            if self.dead.is_set():
                raise Died
            if self.die_after is not None and self.reported >= self.die_after:
                self.dead.set()
                raise Died
            self.reported += 1
            assert self.listener is not None
            self.listener.packet_done(packet)

    def _run(self, job: ElementaryJob, done: list[tuple[str, int, int]]) -> None:
        assert self.listener is not None
        try:
            self.listener.job_state(job.id, JobState.RUNNING, node="node-0")
            while job.user in self.hold_users and job.id not in self.cancelled:
                time.sleep(0.01)
            done_starts = {(u, a) for u, a, _ in done}
            for f in job.files:
                for a in range(0, f.n_events, self.packet):
                    if job.id in self.cancelled:
                        self.listener.job_state(job.id, JobState.ABORTED)
                        return
                    if (f.url, a) in done_starts and not self.replay:
                        continue
                    b = min(a + self.packet, f.n_events)
                    time.sleep(self.delay_s)
                    result = pickle.dumps({"events": b - a})
                    self._report(
                        PacketDone(job.id, f.url, a, b, "node-0", 100 * (b - a), 0.01, result)
                    )
            if self.dead.is_set():
                return
            self.listener.job_state(job.id, JobState.COMPLETED, node="node-0", log="done\n")
        except Died:
            return

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)

    def cluster(self) -> Mapping[str, Any]:
        return {"nodes": [{"name": "node-0", "slots": 2, "cache_fill": 0.5, "running": []}]}

    def merge(self, work: ProcessorWork, results: Sequence[bytes]) -> bytes:
        """What a worker's sandbox does with a request's results (here, in the test's
        process: the stand-in's results are its own plain dicts)."""
        self.merged.append(len(results))
        return pickle.dumps(merge_all(pickle.loads(b) for b in results))

    def stop(self) -> None:
        for t in self._threads:
            t.join(timeout=5)

    def wait(self, timeout: float = 10.0) -> None:
        """Until every job's thread has ended."""
        deadline = time.monotonic() + timeout
        for t in list(self._threads):
            t.join(timeout=max(0.0, deadline - time.monotonic()))


def make_fake_runner(**options: Any) -> FakeRunner:
    """``datasched serve --runner svc_support:make_fake_runner``: packets of 5 entries,
    one every ``DATASCHED_FAKE_DELAY_S`` seconds (default 0.05)."""
    import os

    return FakeRunner(packet=5, delay_s=float(os.environ.get("DATASCHED_FAKE_DELAY_S", "0.05")))


def seed(store: Store) -> dict[str, str]:
    """Users ann and bob (group physics), root (admin), and a catalog of two datasets."""
    with store.session() as s:
        tokens = {
            "ann": add_user(s, "ann", "physics"),
            "bob": add_user(s, "bob", "physics"),
            "root": add_user(s, "root", "admins", admin=True),
        }
    cat = Catalog(store)
    cat.put(
        "auau200",
        [FileRef(f"/star/auau/{i}.root", 30, 3000, "T") for i in range(3)],
        {"year": 2004, "system": "AuAu", "energy": 200, "keywords": ["minbias"]},
    )
    cat.put("pp", [FileRef("/star/pp/0.root", 15, 1500, "T")], {"year": 2005, "system": "pp"})
    return tokens


def one_running_job(
    store: Store, node: str = "w1", entries: int = 100, n_bytes: int = 1000
) -> tuple[str, str]:
    """A request of ann's (group g) with one job over one file (``/d/0.root``) of
    ``entries`` entries and ``n_bytes`` bytes, running on ``node``: (request id, job id)."""
    from datasched.service.daemon import StoreListener
    from datasched.service.store import ops
    from datasched.service.users import authenticate

    with store.session() as s:
        caller = authenticate(s, add_user(s, "ann", "g"))
        assert caller is not None
        rid = ops.new_request_id()
        work = ProcessorWork("p.py:P")
        jobs = [ElementaryJob(rid, 0, (FileRef("/d/0.root", entries, n_bytes),), work)]
        ops.store_accepted(
            s, caller, rid, "raw", "application/yaml", MetaJobRequest("ann", work, ()), jobs
        )
    StoreListener(store).job_state(jobs[0].id, JobState.RUNNING, node=node)
    return rid, jobs[0].id


@contextmanager
def serving_on_loopback(state: Any) -> Iterator[str]:
    """The application over ``state`` (a ServiceState) served by uvicorn on a free loopback
    port, in a thread, until the block ends: yields its URL."""
    import uvicorn

    from datasched.service.app import create_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    srv = uvicorn.Server(
        uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline, "the daemon did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
