"""The service end to end, with its real parts: requests in YAML and XML read by the request
language, the catalog in the store, the runner on a real Dask cluster (two local workers),
the API. A processor request completes with the histogram computed directly; a command
request runs on a worker with its files' cached paths; another user cannot see either."""

from __future__ import annotations

import pickle
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("distributed", reason="the runtime extra is not installed")
pytest.importorskip("fastapi", reason="the service extra is not installed")

from fastapi.testclient import TestClient

from datasched.service.app import build_state, create_app
from datasched.service.catalog import Catalog
from datasched.service.ports import ContractLanguage
from datasched.service.store.db import Store
from datasched.service.threaded import make_runner
from datasched.service.usercode import SandboxCheck, SandboxCounter
from datasched.service.users import add_user
from runtime_support import reference_counts
from sandbox_support import confinement

N_EVENTS = 3000


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from datasched.runtime.demodata import write_demo_dataset

    root = tmp_path_factory.mktemp("service-e2e")
    root.chmod(0o755)  # a root of the service's: the jobs' account reaches it
    catalog_yaml = write_demo_dataset(root / "data", n_events=N_EVENTS, n_files=3, seed=5)
    store = Store(f"sqlite:///{root / 'store.db'}")
    Catalog(store).import_yaml(catalog_yaml)
    with store.session() as s:
        tokens = {"ann": add_user(s, "ann", "physics"), "bob": add_user(s, "bob", "physics")}
    confine = confinement()
    runner = make_runner(
        workers=2, cache_dir=root / "cache", roots=[root], policy="out-of-order", confine=confine
    )
    language = ContractLanguage(
        [root], code_check=SandboxCheck(confine, [root]), count_events=SandboxCounter(confine)
    )
    state = build_state(store, language, runner=runner, period_s=0.1)
    with TestClient(create_app(state)) as client:
        yield {"client": client, "tokens": tokens, "root": root, "catalog": catalog_yaml}
    store.close()


def _headers(svc: dict[str, Any], user: str, kind: str = "yaml") -> dict[str, str]:
    return {
        "Authorization": f"Bearer {svc['tokens'][user]}",
        "Content-Type": f"application/{kind}",
    }


def _wait_final(svc: dict[str, Any], rid: str, user: str = "ann") -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        got = svc["client"].get(f"/api/v1/requests/{rid}", headers=_headers(svc, user))
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        if body["state"] in {"completed", "failed", "aborted"}:
            return body
        assert time.monotonic() < deadline, f"request {rid} still {body['state']}"
        time.sleep(0.2)


def _result(svc: dict[str, Any], rid: str, user: str = "ann") -> bytes:
    """The request's result, once it is merged (409 with Retry-After meanwhile)."""
    deadline = time.monotonic() + 60
    while True:
        got = svc["client"].get(f"/api/v1/requests/{rid}/result", headers=_headers(svc, user))
        if got.status_code == 200:
            return bytes(got.content)
        assert got.status_code == 409, got.text
        assert "Retry-After" in got.headers, got.text
        assert time.monotonic() < deadline, "the result was not merged"
        time.sleep(0.2)


def test_a_processor_request_completes_with_every_event_once(service: dict[str, Any]) -> None:
    text = """
title: dimuon mass
processor: {name: "datasched.runtime.demodata:DimuonMass", tree: Events}
inputs:
  - dataset: {query: "dataset=zmumu"}
"""
    sent = service["client"].post(
        "/api/v1/requests", content=text, headers=_headers(service, "ann")
    )
    assert sent.status_code == 201, sent.text
    rid = sent.json()["id"]
    body = _wait_final(service, rid)
    assert body["state"] == "completed", body
    assert body["progress"]["events"] == N_EVENTS
    got = _result(service, rid)
    result = pickle.loads(got)  # ann's own result, merged on a worker
    counts = [float(x) for x in result["mass"].values()]
    assert counts == reference_counts(service["catalog"], 0, N_EVENTS)
    # Another user neither sees nor cancels it.
    other = _headers(service, "bob")
    assert service["client"].get(f"/api/v1/requests/{rid}", headers=other).status_code == 404
    assert service["client"].delete(f"/api/v1/requests/{rid}", headers=other).status_code == 404
    cluster = service["client"].get("/api/v1/cluster", headers=_headers(service, "ann")).json()
    assert len(cluster["nodes"]) == 2


def test_an_xml_command_request_runs_on_a_worker(service: dict[str, Any]) -> None:
    script = service["root"] / "count.py"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os\n"
        "paths = open(os.environ['FILELIST']).read().split()\n"
        "print(len(paths), all(os.path.exists(p) for p in paths))\n"
    )
    script.chmod(0o755)
    xml = f"""<?xml version="1.0" encoding="UTF-8"?>
<job maxFilesPerProcess="5">
  <command>{script} $FILELIST</command>
  <input URL="catalog:dataset=zmumu"/>
</job>"""
    sent = service["client"].post(
        "/api/v1/requests", content=xml, headers=_headers(service, "ann", "xml")
    )
    assert sent.status_code == 201, sent.text
    rid = sent.json()["id"]
    body = _wait_final(service, rid)
    assert body["state"] == "completed", body
    logs = service["client"].get(f"/api/v1/requests/{rid}/logs", headers=_headers(service, "ann"))
    assert logs.status_code == 200
    assert "3 True" in logs.text


def test_an_invalid_request_is_refused_with_its_fields(service: dict[str, Any]) -> None:
    text = """
processor: {name: "no_such_module:Nothing"}
inputs:
  - dataset: {query: "dataset=nope"}
colour: blue
"""
    sent = service["client"].post(
        "/api/v1/requests", content=text, headers=_headers(service, "ann")
    )
    assert sent.status_code == 422, sent.text
    fields = {e["field"] for e in sent.json()["errors"]}
    assert "colour" in fields
