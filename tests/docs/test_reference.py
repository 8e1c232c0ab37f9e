"""The reference pages are generated from the code (scripts/gen_docs.py) and say something about everything: a CLI
flag, a setting or an HTTP route without reference text fails here, and so does a page older than the code.

After adding a flag, setting or route: give it its help / description / docstring, then `python scripts/gen_docs.py`.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
REGENERATE = "run `python scripts/gen_docs.py` and commit the pages"


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_docs = _gen_docs()


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    document: dict[str, Any] = gen_docs.openapi_document()
    return document


def test_every_cli_flag_and_argument_has_help_text_in_the_reference() -> None:
    from juiz_cli import build_parser

    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    missing = []
    for command, action in gen_docs.cli_options(build_parser()):
        name = action.option_strings[-1] if action.option_strings else action.dest.upper()
        if not (action.help and action.help != argparse.SUPPRESS):
            missing.append(f"juiz {command} {name}: no help text")
        elif f"`{name}`" not in page.split(f"## `juiz {command}`", 1)[-1]:
            missing.append(f"juiz {command} {name}: not in docs/reference/cli.md ({REGENERATE})")
    assert not missing, "\n".join(missing)


def test_every_setting_has_a_description_in_the_reference() -> None:
    from juiz.runtime.settings import ENV_PREFIX, Settings

    page = (REPO / "docs" / "reference" / "settings.md").read_text()
    missing = []
    for name, field in Settings.model_fields.items():
        variable = f"{ENV_PREFIX}{name.upper()}"
        if not (field.description or "").strip():
            missing.append(f"{variable}: no description= in Settings")
        elif f"| `{variable}` |" not in page:
            missing.append(f"{variable}: not in docs/reference/settings.md ({REGENERATE})")
    assert not missing, "\n".join(missing)


def test_every_route_has_a_summary_and_a_description_in_the_reference(openapi: dict[str, Any]) -> None:
    page = (REPO / "docs" / "reference" / "http-api.md").read_text()
    missing = []
    for method, path, operation in gen_docs.api_routes(openapi):
        if not operation.get("summary") or not (operation.get("description") or "").strip():
            missing.append(f"{method} {path}: needs a summary and a docstring")
        elif f"## `{method} {path}`" not in page:
            missing.append(f"{method} {path}: not in docs/reference/http-api.md ({REGENERATE})")
    assert len(list(gen_docs.api_routes(openapi))) >= 10
    assert not missing, "\n".join(missing)


def test_the_generated_pages_are_those_the_code_gives() -> None:
    stale = [
        str(path.relative_to(REPO))
        for path, build in gen_docs.pages().items()
        if not path.exists() or path.read_text() != build()
    ]
    assert not stale, f"stale: {', '.join(stale)}: {REGENERATE}"


def test_the_site_lists_every_page_and_the_readme_links_resolve() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    docs = REPO / "docs"
    unlisted = [str(p.relative_to(docs)) for p in docs.rglob("*.md") if str(p.relative_to(docs)) not in nav]
    assert not unlisted, f"pages missing from mkdocs.yml's nav: {unlisted}"
    readme = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\(((?:docs/|CHANGELOG)[^)#]*)", readme)
    broken = [target for target in targets if not (REPO / target).exists()]
    assert not broken, f"README links to missing files: {broken}"


def test_the_readme_stays_one_screen() -> None:
    text = (REPO / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 200 and len(text) <= 12_000
    first_block = next(i for i, line in enumerate(lines) if line.startswith("```"))
    assert first_block < 40
