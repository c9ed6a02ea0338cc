"""Hostile and malformed input never makes the API fail (no 5xx): random bodies under
every content type, random request ids and queries, random tokens (Hypothesis)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datasched.service.api.deps import Limits
from datasched.service.app import build_state, create_app
from datasched.service.catalog import Catalog
from datasched.service.contracts import FileRef
from datasched.service.store.db import Store
from datasched.service.users import add_user
from svc_support import FakeLanguage

PRINTABLE = st.characters(min_codepoint=32, max_codepoint=126)
CONTENT_TYPES = st.sampled_from(
    ["application/yaml", "application/xml", "text/yaml", "application/json", "", "x/y; q=1"]
)
YAMLISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["processor", "command", "input", "catalog", "title", "username", "files_per_job"]
            )
            | st.text(max_size=8),
            inner,
            max_size=5,
        )
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "store.db"
    store = Store(str(path))
    with store.session() as s:
        token = add_user(s, "ann", "g")
    Catalog(store).put("d", [FileRef("/d/0.root", 10, 100)], {"year": 2004})
    state = build_state(
        store,
        FakeLanguage(),
        limits=Limits(max_request_bytes=2000, rate_per_s=1e6, burst=10**6),
    )
    with TestClient(create_app(state)) as c:
        yield c, token
    store.close()


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(st.binary(max_size=300), YAMLISH.map(lambda d: str(d).encode())),
    ctype=CONTENT_TYPES,
)
def test_any_submission_gets_an_answer_with_errors_not_a_crash(
    client: tuple[TestClient, str], body: bytes, ctype: str
) -> None:
    c, token = client
    r = c.post(
        "/api/v1/requests",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": ctype},
    )
    assert r.status_code in (201, 413, 415, 422), r.text
    if r.status_code != 201:
        assert all({"field", "reason"} <= set(e) for e in r.json()["errors"])


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from(["/requests/{}", "/requests/{}/logs", "/requests/{}/result"]),
    # "." and ".." are dot segments: the client resolves them before sending (RFC 3986,
    # 5.2.4), so "/requests/." is the listing "/requests", another route, not an id.
    rid=st.text(PRINTABLE.filter(lambda c: c not in "/?#% "), min_size=1, max_size=30).filter(
        lambda s: s not in {".", ".."}
    ),
    query=st.text(max_size=40),
    token=st.one_of(st.none(), st.text(PRINTABLE, max_size=40)),
)
def test_any_id_query_or_token_gets_an_answer_not_a_crash(
    client: tuple[TestClient, str], path: str, rid: str, query: str, token: str | None
) -> None:
    c, good = client
    headers = {"Authorization": f"Bearer {good if token is None else token}"}
    r = c.get("/api/v1" + path.format(rid), headers=headers)
    assert r.status_code in (401, 404, 409, 422), r.text
    r = c.get("/api/v1/catalog/datasets", params={"query": query}, headers=headers)
    assert r.status_code in (200, 401, 422), r.text
