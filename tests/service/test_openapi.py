"""The OpenAPI schema at /api/v1/openapi.json says what the API does: the bearer scheme on
every operation, each operation's error statuses with the API's own error schema (no
FastAPI ``HTTPValidationError``), and the answers themselves have that shape (401 with
``WWW-Authenticate``, 422 for a parameter FastAPI refuses, 429 with ``Retry-After``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from datasched.service.api.deps import Limits
from datasched.service.app import build_state, create_app
from datasched.service.store.db import Store
from svc_support import FakeLanguage, seed

P = "/api/v1"
EXPECTED = {
    ("get", f"{P}/requests"): {401, 422, 429},
    ("post", f"{P}/requests"): {401, 413, 415, 422, 429, 503},
    ("get", f"{P}/requests/{{request_id}}"): {401, 404, 429},
    ("delete", f"{P}/requests/{{request_id}}"): {401, 404, 429},
    ("get", f"{P}/requests/{{request_id}}/logs"): {401, 404, 429},
    ("get", f"{P}/requests/{{request_id}}/result"): {401, 404, 409, 422, 429},
    ("get", f"{P}/catalog/datasets"): {401, 422, 429},
    ("get", f"{P}/cluster"): {401, 429},
    ("get", f"{P}/groups"): {401, 429},
    ("put", f"{P}/groups/{{name}}"): {401, 403, 413, 422, 429},
    ("get", f"{P}/whatif"): {400, 401, 422, 429, 500, 503},
}
ERRORS = "#/components/schemas/Errors"


@pytest.fixture
def client(sqlite_store: Store) -> Iterator[tuple[TestClient, dict[str, str]]]:
    tokens = seed(sqlite_store)
    state = build_state(sqlite_store, FakeLanguage(), limits=Limits(rate_per_s=0.001, burst=5))
    with TestClient(create_app(state)) as c:
        yield c, tokens


@pytest.fixture
def schema(client: tuple[TestClient, dict[str, str]]) -> dict[str, Any]:
    r = client[0].get(f"{P}/openapi.json")
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    return body


def _operations(schema: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m, p): op for p, ops in schema["paths"].items() for m, op in ops.items()}


def test_the_bearer_scheme_is_declared_and_required_everywhere(schema: dict[str, Any]) -> None:
    schemes = schema["components"]["securitySchemes"]
    assert len(schemes) == 1
    ((name, scheme),) = schemes.items()
    assert scheme["type"] == "http"
    assert scheme["scheme"] == "bearer"
    operations = _operations(schema)
    assert set(operations) == set(EXPECTED)  # every route of the API, nothing unlisted
    for key, op in operations.items():
        assert op.get("security") == [{name: []}], key


def test_each_operation_declares_its_error_statuses_with_the_error_schema(
    schema: dict[str, Any],
) -> None:
    for key, op in _operations(schema).items():
        errors = {int(s) for s in op["responses"] if int(s) >= 400}
        assert errors == EXPECTED[key], key
        for status in errors:
            answer = op["responses"][str(status)]
            assert answer["description"], (key, status)
            ref = answer["content"]["application/json"]["schema"]["$ref"]
            if key == ("post", f"{P}/requests") and status == 422:
                assert ref == "#/components/schemas/Refused"
            else:
                assert ref == ERRORS, (key, status)
        if 401 in errors:
            assert "WWW-Authenticate" in op["responses"]["401"]["headers"]
        if 429 in errors:
            assert "Retry-After" in op["responses"]["429"]["headers"]


def test_the_error_schema_is_ours_and_fastapis_is_gone(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    assert "HTTPValidationError" not in components
    assert "ValidationError" not in components
    assert "HTTPValidationError" not in str(schema)
    errors = components["Errors"]
    assert errors["required"] == ["errors"]
    assert errors["properties"]["errors"]["items"]["$ref"] == "#/components/schemas/FieldError"
    field = components["FieldError"]
    assert set(field["required"]) == {"field", "reason"}
    assert {field["properties"][k]["type"] for k in ("field", "reason")} == {"string"}
    refused = components["Refused"]
    assert {"errors", "id", "state"} <= set(refused["properties"])


def test_the_answers_have_the_declared_shape(client: tuple[TestClient, dict[str, str]]) -> None:
    c, tokens = client
    r = c.get(f"{P}/cluster")
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert r.json() == {"errors": [{"field": "Authorization", "reason": "a valid token is needed"}]}
    h = {"Authorization": f"Bearer {tokens['ann']}"}
    r = c.get(f"{P}/requests/abc/result", params={"packets": "perhaps"}, headers=h)
    assert r.status_code == 422
    assert [e["field"] for e in r.json()["errors"]] == ["query.packets"]
    r = c.get(f"{P}/whatif", params={"policy": "farm"}, headers=h)  # no runner here
    assert r.status_code == 503
    assert r.json() == {"errors": [{"field": "snapshot", "reason": "no live cluster state here"}]}
    r = c.put(f"{P}/groups/g", json={"priority": 2}, headers=h)
    assert r.status_code == 403
    assert r.json()["errors"][0]["field"] == "caller"
    r = c.get(f"{P}/requests/nope", headers=h)
    assert r.status_code == 404
    assert r.json()["errors"][0]["field"] == "id"
    codes = [c.get(f"{P}/requests", headers=h).status_code for _ in range(3)]
    assert codes[-1] == 429
    r = c.get(f"{P}/requests", headers=h)
    assert r.json()["errors"][0]["field"] == "rate"
    assert int(r.headers["Retry-After"]) >= 1
