"""The service's scene of the tour (``datasched demo-service``): the daemon on loopback over a
fresh store, the demo dataset in its catalog, three users submitting overlapping requests in
XML and YAML at once, each watched until it ends, then a summary (and, where a headless
Chromium is installed, the dashboard's screenshot).

* ann (group physics) asks for the dimuon mass over the whole dataset, in YAML;
* bob (group physics) asks for the same processor over the first half of the files, in
  STAR's XML (a wildcard path): his files overlap ann's, so the second reads come from the
  workers' caches;
* cy (group heavy-ion) runs a STAR-style command over the catalog's files, in XML: an
  executable on the workers given its files' cached paths.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datasched.sandbox.confine import Confinement

__all__ = ["DemoRequest", "ServiceDemo", "demo_confinement", "demo_requests", "run_service_demo"]


@dataclass(frozen=True, slots=True)
class DemoRequest:
    user: str
    group: str
    kind: str
    """``yaml`` or ``xml``."""
    text: str


COUNTER = """#!{python}
import os
paths = open(os.environ["FILELIST"]).read().split()
print(len(paths), "files,", sum(os.path.getsize(p) for p in paths), "bytes, all on local disk:",
      all(os.path.exists(p) for p in paths))
"""


def demo_requests(data_dir: Path, tools_dir: Path) -> list[DemoRequest]:
    """The three users' requests over the demo dataset in ``data_dir``; ``tools_dir`` gets
    cy's executable."""
    counter = tools_dir / "count-files.py"
    counter.write_text(COUNTER.format(python=sys.executable))
    counter.chmod(0o755)
    n_files = len(sorted(data_dir.glob("part-*.root")))
    half = "".join(f"{i:03d}"[-1] for i in range(min(10, max(1, n_files // 2))))
    return [
        DemoRequest(
            "ann",
            "physics",
            "yaml",
            "title: dimuon mass, all of zmumu\n"
            "processor: {name: 'datasched.runtime.demodata:DimuonMass', tree: Events}\n"
            "inputs:\n  - dataset: {query: 'dataset=zmumu'}\n",
        ),
        DemoRequest(
            "bob",
            "physics",
            "xml",
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<job name="dimuon, first files">\n'
            '  <processor name="datasched.runtime.demodata:DimuonMass" tree="Events"/>\n'
            f'  <input URL="file:{data_dir}/part-00[{half}].root"/>\n'
            "</job>\n",
        ),
        DemoRequest(
            "cy",
            "heavy-ion",
            "xml",
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<job name="count files" maxFilesPerProcess="10">\n'
            f"  <command>{counter} $FILELIST</command>\n"
            '  <input catalog="dataset=zmumu"/>\n'
            "</job>\n",
        ),
    ]


_COUNTED = ("events", "bytes", "packets", "events_total")
"""A request's progress as the API gives it (null for a command's)."""

DEMO_ACCOUNT = "nobody"
"""The account the demo's jobs run as when it runs as root."""


def demo_confinement() -> Confinement:
    """The demo's confinement: a sandbox where one can be made (as root, jobs run as
    ``nobody``); else, saying so on stderr, a plain child process, as ``serve --no-sandbox``
    gives on one's own machine."""
    import os

    from datasched.sandbox.confine import Confinement, sandbox_problem

    problem = sandbox_problem()
    if problem is None:
        return Confinement(run_as=DEMO_ACCOUNT if os.geteuid() == 0 else None)
    print(f"users' code runs unconfined in this demo ({problem})", file=sys.stderr)
    return Confinement(bwrap=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServiceDemo:
    """A daemon running on loopback: its URL and the users' tokens."""

    url: str
    tokens: dict[str, str]
    store_url: str
    service: Any = None
    """The daemon's :class:`~datasched.service.api.deps.ServiceState` (its ETA records)."""


@contextmanager
def serving(
    work: Path,
    data_dir: Path,
    *,
    workers: int,
    policy: str,
    users: dict[str, str],
    tertiary_mb_s: float | None = None,
    eta_period_s: float = 2.0,
    confine: Confinement | None = None,
) -> Iterator[ServiceDemo]:
    """The daemon over a fresh store in ``work``, its catalog the demo dataset, ``users``
    (name → group) with tokens, serving on a free loopback port until the block ends; users'
    code confined by ``confine`` (default :func:`demo_confinement`)."""
    import uvicorn

    from datasched.service.app import build_state, create_app
    from datasched.service.catalog import Catalog
    from datasched.service.ports import ContractLanguage
    from datasched.service.store.db import Store
    from datasched.service.threaded import make_runner
    from datasched.service.usercode import SandboxCheck, SandboxCounter
    from datasched.service.users import add_user

    store_url = f"sqlite:///{work / 'service.db'}"
    store = Store(store_url)
    Catalog(store).import_yaml(data_dir / "catalog.yaml")
    with store.session() as s:
        tokens = {name: add_user(s, name, group) for name, group in users.items()}
    confine = confine or demo_confinement()
    roots = [data_dir.resolve(), work.resolve()]
    runner = make_runner(
        workers=workers,
        cache_dir=work / "cache",
        roots=roots,
        policy=policy,
        tertiary_mb_s=tertiary_mb_s,
        confine=confine,
    )
    language = ContractLanguage(
        roots, code_check=SandboxCheck(confine, roots), count_events=SandboxCounter(confine)
    )
    state = build_state(store, language, runner=runner, policy=policy, eta_period_s=eta_period_s)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 300
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the daemon did not start")
            time.sleep(0.05)
        yield ServiceDemo(f"http://127.0.0.1:{port}", tokens, store_url, state)
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        store.close()


def run_service_demo(
    out_dir: Path,
    data_dir: Path,
    *,
    workers: int = 2,
    policy: str = "out-of-order",
    on_progress: Callable[[list[dict[str, Any]]], None] | None = None,
    screenshot: bool = True,
    timeout_s: float = 600.0,
    tertiary_mb_s: float | None = 0.25,
) -> dict[str, Any]:
    """Run the scene; returns its summary (also written to ``out_dir/summary.json``).
    ``tertiary_mb_s``: each worker's reads from storage throttled, as tape would be (the
    runtime demo's 0.25 MB/s), so that the caches' worth shows; None: not throttled."""
    import json

    import httpx

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="datasched-service-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)  # a root of the service's: the jobs' account reaches it
        requests = demo_requests(data_dir.resolve(), work)
        users = {r.user: r.group for r in requests}
        with serving(
            work,
            data_dir.resolve(),
            workers=workers,
            policy=policy,
            users=users,
            tertiary_mb_s=tertiary_mb_s,
        ) as d:
            client = httpx.Client(base_url=d.url, timeout=60)
            started = time.monotonic()
            ids: list[tuple[DemoRequest, str]] = []
            for r in requests:
                sent = client.post(
                    "/api/v1/requests",
                    content=r.text,
                    headers={
                        "Authorization": f"Bearer {d.tokens[r.user]}",
                        "Content-Type": f"application/{r.kind}",
                    },
                )
                if sent.status_code != 201:
                    raise RuntimeError(f"{r.user}'s request was refused: {sent.text}")
                ids.append((r, sent.json()["id"]))
            rows: list[dict[str, Any]] = []
            while True:
                rows = []
                for r, rid in ids:
                    got = client.get(
                        f"/api/v1/requests/{rid}",
                        headers={"Authorization": f"Bearer {d.tokens[r.user]}"},
                    ).json()
                    rows.append(
                        {
                            "user": r.user,
                            "group": r.group,
                            "form": r.kind,
                            "id": rid,
                            "title": got.get("title", ""),
                            "state": got["state"],
                            "jobs": len(got["jobs"]),
                            "kind": got.get("kind", "processor"),
                            # A command's request counts no events (null): it reads none.
                            **(got["progress"] or dict.fromkeys(_COUNTED)),
                            "eta": got.get("eta"),
                        }
                    )
                if on_progress is not None:
                    on_progress(rows)
                if all(row["state"] in {"completed", "failed", "aborted"} for row in rows):
                    break
                if time.monotonic() - started > timeout_s:
                    raise RuntimeError(f"the requests did not end within {timeout_s:.0f} s")
                time.sleep(0.5)
            elapsed = time.monotonic() - started
            shot, no_shot = None, None
            if screenshot:
                shot, no_shot = _screenshot(d, out_dir / "dashboard.png")
            client.close()
    summary = {
        "elapsed_s": elapsed,
        "policy": policy,
        "requests": rows,
        "screenshot": shot,
        "screenshot_missing": no_shot,
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


SCREENSHOT_HINT = (
    "the dashboard's screenshot needs Chromium (Debian: apt install chromium) and Playwright "
    "(pip install 'datasched[dev]'), which drives it"
)
"""What ``demo-service`` says when it cannot take the screenshot (docs/service-dashboard.md)."""


def _screenshot(demo: ServiceDemo, path: Path) -> tuple[str | None, str | None]:
    """The dashboard's screenshot, where Playwright and a headless Chromium are installed:
    (its path, None); otherwise (None, one line saying why and how to get it)."""
    try:
        from playwright.sync_api import sync_playwright  # noqa: F401  # only: is it there?

        from datasched.service.dashboard.shot import chromium_path, take_screenshot
    except ImportError as exc:
        return None, f"no screenshot: {exc.name or exc} is not installed: {SCREENSHOT_HINT}"
    if chromium_path() is None:
        return None, f"no screenshot: no Chromium found: {SCREENSHOT_HINT}"
    token = demo.tokens[sorted(demo.tokens)[0]]
    try:
        take_screenshot(demo.url, token, path)
    except Exception as exc:  # a browser that fails: the scene still ran
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"no screenshot: Chromium failed: {first}"
    return str(path), None
