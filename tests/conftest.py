"""Shared fixtures. Paths to the owner's shared folder are optional: tests that need it skip without it."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
EXAMPLES = REPO / "examples"


@pytest.fixture
def seeds_dir() -> Path:
    """The three seed reports, copied into examples/ so every machine has them."""
    return EXAMPLES / "seeds"


@pytest.fixture
def golden_set() -> Path:
    path = SHARED / "data" / "answer_relevance_golden_set.jsonl"
    if not path.exists():
        pytest.skip("../shared/data is not present on this machine")
    return path


@pytest.fixture(scope="session")
def tiny_engine():  # type: ignore[no-untyped-def]
    """One real vLLM engine on SmolLM2-135M for the whole session (it takes 20–40 s to start on CPU).

    Shared by tests/engine and the end-to-end service test. Skips with the reason when the model was never pulled.
    """
    from juiz.engines.models import TEST_MODEL, model_dir
    from juiz.engines.vllm_engine import VLLMEngine

    if not (model_dir(TEST_MODEL) / "config.json").exists():
        pytest.skip(f"{TEST_MODEL} is not provisioned: run `juiz models pull {TEST_MODEL}`")
    # A small KV cache and context keep the session's footprint small; the code path is the production one.
    engine = VLLMEngine(str(model_dir(TEST_MODEL)), model_id=TEST_MODEL, max_model_len=4096)
    yield engine
    engine.close()
