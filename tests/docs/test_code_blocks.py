"""Every code block of the README and the tutorials runs in a test or says why not.

Blocks marked `run` are run in order, page by page, in a fresh folder, as the real CLI on the FAKE engine: a block of
`juiz` commands in this process (`juiz_cli.main`, the engine builder swapped), any other shell block by bash with
`juiz` on PATH as the same CLI in a child process (tests/docs/fake_juiz.py). Blocks marked `run service` need the
HTTP service: they run against a private Redis, `juiz serve` and the FAKE worker (integration). Blocks marked `skip`
carry their reason."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.fake_worker import FakeWorkerEngine
from juiz.judging import backend
from juiz_cli import main
from tests.docs.blocks import REPO, TESTED_PAGES, Block, blocks

RUNNABLE = {"sh", "bash", "python"}
# Added to a page's command when the test runs it: the bootstrap's 1000 resamples only make a test slower, and the
# figures of three FAKE grades are not what the test checks.
QUICKER = {"agreement": ["--resamples", "50"]}
TIMEOUT_S = 300


def _all_blocks() -> Iterator[Block]:
    for page in TESTED_PAGES:
        yield from blocks(page)


def _needs_service(block: Block) -> bool:
    return block.reason.startswith("service")


def test_every_block_runs_in_a_test_or_says_why() -> None:
    problems = []
    for block in _all_blocks():
        if block.marker is None:
            problems.append(f"{block.where()}: no <!-- docs-test: run|skip (why) --> marker above the block")
        elif block.marker == "skip" and not block.reason:
            problems.append(f"{block.where()}: skipped without a reason")
        elif block.marker == "run" and block.language not in RUNNABLE:
            problems.append(f"{block.where()}: marked run, but a {block.language or 'plain'} block cannot be run")
    assert not problems, "\n".join(problems)


def _shim(folder: Path) -> dict[str, str]:
    """An environment whose `juiz` is the real CLI on the FAKE engine."""
    bin_dir = folder / ".bin"
    bin_dir.mkdir()
    juiz = bin_dir / "juiz"
    juiz.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.docs.fake_juiz "$@"\n')
    juiz.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "JUIZ_LOG_LEVEL": "WARNING",
    }


def _run_sh(block: Block, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, f"{block.where()} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _juiz_commands(block: Block) -> list[list[str]] | None:
    """The block's commands as argv lists when every one of them is `juiz …`, else None."""
    commands = []
    for line in block.code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] != "juiz":
            return None
        commands.append(words[1:])
    return commands


@pytest.mark.parametrize("page", TESTED_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_blocks_of_a_page_run_in_order(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runnable = [b for b in blocks(page) if b.marker == "run" and not _needs_service(b)]
    if not runnable:
        pytest.skip(f"{page.name} has no block to run without the service")
    (tmp_path / "examples").symlink_to(REPO / "examples")  # the README's commands name the repository's examples
    env = _shim(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(backend, "build_engine", lambda settings, say=None: FakeWorkerEngine())
    for block in runnable:
        commands = _juiz_commands(block) if block.language != "python" else None
        if commands is not None:
            for argv in commands:
                argv = [*argv, *QUICKER.get(argv[0], [])]
                assert main(argv) == 0, f"{block.where()}: juiz {shlex.join(argv)} failed"
        elif block.language == "python":
            exec(compile(block.code, block.where(), "exec"), {})
        else:
            _run_sh(block, tmp_path, env)
    if page.name == "first-jsonl.md":
        assert (tmp_path / "results.jsonl").read_text().count("\n") == 3
        assert (tmp_path / "report.md").exists()


@pytest.mark.integration
def test_the_service_blocks_run_against_a_service(docs_stack: dict[str, str], tmp_path: Path) -> None:
    service_blocks = [b for b in _all_blocks() if b.marker == "run" and _needs_service(b)]
    assert service_blocks, "the README shows the HTTP API and the Python client"
    env = {**_shim(tmp_path), "API": docs_stack["url"], "KEY": docs_stack["key"]}
    rows = [
        {"id": "a", "question": "What is 2 + 2?", "answer": "4.", "manual_label": "C"},
        {"id": "b", "question": "Who wrote Dom Casmurro?", "answer": "I don't know.", "manual_label": "I"},
    ]
    for block in service_blocks:
        if block.language == "python":
            namespace = {"url": docs_stack["url"], "key": docs_stack["key"], "rows": rows}
            exec(compile(block.code, block.where(), "exec"), namespace)
        else:
            out = _run_sh(block, tmp_path, env)
            assert '"status"' in out and '"items"' in out, out
