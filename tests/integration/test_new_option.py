"""Adding a batch option is one field in schemas/ (declared once): a copy of `schemas/` with one more field
on BatchOptions, and nothing else changed, gives the CLI a flag, the JSONL upload a query parameter (read and
documented in the OpenAPI document) and the web page's upload form a field it reads — in a fresh interpreter, so every
table derived at import time is derived from the new declaration."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from redis import Redis

REPO = Path(__file__).resolve().parents[2]
NEW_FIELD = """    max_reasons: int = Field(
        default=3, ge=1, le=10, description="Test-only option: how many reasons a result may list."
    )
"""

CHECKS = """
import json, sys

from litestar.testing import TestClient
from redis import Redis

import schemas
from juiz.cli import build_parser
from juiz.formats.options import options_from_args
from juiz.runtime.settings import Settings
from service.app import create_app

assert schemas.__file__.startswith(sys.argv[2]), schemas.__file__  # the copy with the new field

args = build_parser().parse_args(["score", "in.jsonl", "-o", "out.jsonl", "--max-reasons", "5"])
assert options_from_args(args).max_reasons == 5
assert "--max-reasons" in build_parser()._subparsers._group_actions[0].choices["score"].format_help()

settings = Settings.from_env({}, redis_url=sys.argv[1], rate_limit_per_minute=0, log_level="WARNING")
redis = Redis.from_url(sys.argv[1])
with TestClient(create_app(settings, redis)) as client:
    line = json.dumps({"question": "q?", "answer": "a"}) + "\\n"
    ndjson = {"Content-Type": "application/x-ndjson"}
    posted = client.post("/v1/batches", content=line, headers=ndjson, params={"max_reasons": "4"})
    assert posted.status_code == 202, posted.text
    assert posted.json()["options"]["max_reasons"] == 4
    refused = client.post("/v1/batches", content=line, headers=ndjson, params={"max_reasons": "11"})
    assert refused.status_code == 422 and refused.json()["field"] == "options.max_reasons", refused.text
    spec = client.get("/schema/openapi.json").json()
    documented = {p["name"] for p in spec["paths"]["/v1/batches"]["post"]["parameters"] if p["in"] == "query"}
    assert "max_reasons" in documented

    page = client.get("/ui/batches").text
    token = page.split('name="_csrf_token" value="', 1)[1].split('"', 1)[0]
    files = {"file": ("t.jsonl", line.encode(), "application/x-ndjson")}
    form = {"_csrf_token": token, "max_reasons": "6"}
    uploaded = client.post("/ui/batches", data=form, files=files, follow_redirects=False)
    assert uploaded.status_code == 303, uploaded.text
    batch_id = uploaded.headers["location"].rstrip("/").rsplit("/", 1)[1]
    assert client.get(f"/v1/batches/{batch_id}").json()["options"]["max_reasons"] == 6
redis.close()
print("ok")
"""


def test_a_new_option_field_reaches_the_cli_the_query_and_the_form(
    tmp_path: Path, redis_url: str, redis: Redis
) -> None:
    copy = tmp_path / "schemas"
    shutil.copytree(REPO / "schemas", copy, ignore=shutil.ignore_patterns("__pycache__"))
    batch = copy / "batch.py"
    source = batch.read_text(encoding="utf-8")
    anchor = "    calibration: CalibrationSpec | None = Field("
    assert source.count(anchor) == 1
    batch.write_text(source.replace(anchor, NEW_FIELD + anchor), encoding="utf-8")

    # cwd first on sys.path: the copied schemas/ wins over the repository's; everything else comes from the repository.
    run = subprocess.run(
        [sys.executable, "-c", CHECKS, redis_url, str(copy)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]
