"""The batch's report (the API's /report and the web page's report.md) in the batch's language: English headings for
an English batch, the seeds' Portuguese for a Portuguese one (real Redis, the FAKE worker)."""

from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.testing import TestClient

from juiz.runtime.settings import Settings
from tests.integration.helpers import triples


def portuguese(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"p{i}",
            "question": f"O que a aula diz sobre o tópico {i}? [item-{i}]",
            "answer": f"Ela explica o tópico {i} em detalhe.",
            "manual_label": "C",
        }
        for i in range(n)
    ]


def graded_report(client: TestClient[Litestar], settings: Settings, run_worker: Any, body: dict[str, Any]) -> str:
    created = client.post("/v1/batches", json=body)
    assert created.status_code == 202, created.text
    run_worker(settings)
    batch_id = created.json()["id"]
    api = client.get(f"/v1/batches/{batch_id}/report").text
    page = client.get(f"/ui/batches/{batch_id}/report.md").text
    assert api == page
    return api


def test_the_report_follows_the_batchs_language(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    pt = graded_report(client, settings, run_worker, {"items": portuguese(2)})
    assert pt.startswith("**Pergunta 1**: O que a aula") and pt.count("**Anotação manual**: C") == 2
    assert "**Segmentos recuperados**:\n(sem contexto)" in pt and "Question" not in pt

    en = graded_report(client, settings, run_worker, {"items": triples(2, prefix="e")})
    assert en.startswith("**Question 1**: What does the lecture say") and en.count("**Manual label**: C") == 2
    assert "**Retrieved segments**:\n- *Text:* Transcript about topic 0." in en
    assert "Pergunta" not in en and "Anotação" not in en

    # The batch's lang option decides over the items' own language.
    pinned = graded_report(client, settings, run_worker, {"items": triples(2, prefix="x"), "options": {"lang": "pt"}})
    assert pinned.startswith("**Pergunta 1**: What does the lecture say")
