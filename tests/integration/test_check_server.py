"""`juiz check --server`: the CI gate grading through the real API (private Redis, real RQ worker on the FAKE
engine), with the user's own field names."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from juiz.cli import main
from juiz.clients import http as client_module
from juiz.runtime.settings import Settings
from tests.integration.helpers import cli_against


def test_check_through_the_api(
    client: TestClient[Litestar],
    settings: Settings,
    run_worker: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli_against(client, monkeypatch)
    # The worker runs (burst) before the CLI starts polling.
    wait = client_module.JuizClient.wait

    def work_then_wait(self: client_module.JuizClient, batch_id: str, **kwargs: Any) -> Any:
        run_worker(settings)
        return wait(self, batch_id, **{**kwargs, "poll_s": 0.01})

    monkeypatch.setattr(client_module.JuizClient, "wait", work_then_wait)
    rows = [
        {"query": f"What does the lecture say about topic {i}? [item-{i}]", "response": "It explains."}
        for i in range(4)
    ]
    data = tmp_path / "eval.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    junit = tmp_path / "junit.xml"
    code = main(
        [
            "check",
            str(data),
            "--server",
            "http://juiz",
            "--field-map",
            "common",
            "--min-mean",
            "0.4",
            "--junit",
            str(junit),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "4/4 items graded" in out and "PASSED" in out
    assert [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")] == ["max_unscored", "min_mean"]
    assert "mean normalised score 0.500" in out  # the FAKE engine scores items 0-3 as 0, 1, 2, 3
    # The same data against a bar it can't clear: exit 1, the failed check named.
    assert main(["check", str(data), "--server", "http://juiz", "--field-map", "common", "--min-mean", "0.6"]) == 1
    assert "FAIL  min_mean" in capsys.readouterr().out
