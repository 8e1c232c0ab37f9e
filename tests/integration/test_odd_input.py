"""Odd input and unexpected faults at the API: a lone surrogate (JSON's \\ud800 escape) in any field is a 422 naming
the field, whichever door it came in by; an unhandled exception is a 500 whose request id is in the body, the
X-Request-ID header and the log line with the traceback."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from juiz.runtime.settings import Settings
from juiz.store import Store
from tests.integration.helpers import triples

LONE = "\\ud800"  # as it appears in the JSON text: Python decodes it to a str UTF-8 can't encode


def _body(item_overrides: dict[str, Any], **top: Any) -> str:
    item = {**triples(1)[0], **item_overrides}
    text = json.dumps({"items": [item], **top})
    return text.replace("LONE", LONE)


@pytest.mark.parametrize(
    ("overrides", "top", "field"),
    [
        ({"answer": "LONE"}, {}, "answer"),
        ({"question": "what LONE"}, {}, "question"),
        ({"context": "LONE"}, {}, "context"),
        ({"context": [{"text": "fine"}, {"text": "LONE"}]}, {}, "context.1.text"),
        ({"manual_label": "LONE"}, {}, "manual_label"),
        ({"course": "LONE"}, {}, "course"),  # a pass-through field
        ({"meta": {"tags": ["ok", "LONE"]}}, {}, "meta.tags.1"),
        ({"id": "LONE"}, {}, "id"),
        ({}, {"name": "LONE"}, "name"),
        ({}, {"options": {"label_mapping": {"LONE": "C"}}}, "options.label_mapping"),
    ],
)
def test_a_lone_surrogate_is_a_422_naming_the_field(
    client: TestClient[Litestar], overrides: dict[str, Any], top: dict[str, Any], field: str
) -> None:
    response = client.post(
        "/v1/batches", content=_body(overrides, **top).encode(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field, response.json()


def test_a_lone_surrogate_in_a_jsonl_upload_and_a_grade_request(client: TestClient[Litestar]) -> None:
    line = json.dumps({**triples(1)[0], "answer": "LONE"}).replace("LONE", LONE)
    jsonl = client.post("/v1/batches", content=line.encode(), headers={"Content-Type": "application/x-ndjson"})
    assert jsonl.status_code == 422 and jsonl.json()["field"] == "answer", jsonl.text
    grade = json.dumps({"item": {**triples(1)[0], "context": "LONE"}}).replace("LONE", LONE)
    graded = client.post("/v1/grade", content=grade.encode(), headers={"Content-Type": "application/json"})
    assert graded.status_code == 422 and graded.json()["field"] == "item.context", graded.text


def test_an_unhandled_exception_is_a_500_with_a_request_id_in_the_log(
    client: TestClient[Litestar], settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: Store, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug nobody expected")

    made = client.post("/v1/batches", json={"items": triples(1)})
    assert made.status_code == 202, made.text
    monkeypatch.setattr(Store, "set_batch_name", broken)
    with caplog.at_level(logging.ERROR, logger="service.errors"):
        response = client.patch(f"/v1/batches/{made.json()['id']}", json={"name": "x"})
    assert response.status_code == 500
    body = response.json()
    request_id = body["request_id"]
    assert request_id and response.headers["X-Request-ID"] == request_id
    assert "a bug nobody expected" not in response.text  # the body names no internals
    (record,) = [r for r in caplog.records if request_id in r.getMessage()]
    assert record.exc_info is not None and "a bug nobody expected" in str(record.exc_info[1])


def test_text_exports_name_their_charset_once(client: TestClient[Litestar]) -> None:
    made = client.post("/v1/batches", json={"items": triples(1)})
    report = client.get(f"/v1/batches/{made.json()['id']}/report")
    assert report.headers["content-type"] == "text/markdown; charset=utf-8", report.headers
