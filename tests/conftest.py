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


@pytest.fixture(scope="session")
def tiny_llamacpp_engine():  # type: ignore[no-untyped-def]
    """One real llama.cpp engine on SmolLM2-135M's GGUF (Q4_1) for the whole session (it starts in seconds)."""
    from juiz.engines.llamacpp_engine import LlamaCppEngine, server_config
    from juiz.engines.models import TEST_MODEL, find_gguf

    pytest.importorskip("xllamacpp")
    gguf = find_gguf(TEST_MODEL)
    if gguf is None:
        pytest.skip(f"{TEST_MODEL}'s GGUF is not provisioned: run `juiz models pull {TEST_MODEL}`")
    engine = LlamaCppEngine(server_config(gguf, TEST_MODEL, max_model_len=4096))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def tiny_judge_engine(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """The engine `JUIZ_ENGINE=auto` picks on this machine for the test model (llama.cpp on an AVX2 CPU, else vLLM)."""
    from juiz.engines.models import TEST_MODEL
    from juiz.judging.backend import chosen_engine
    from juiz.runtime.settings import Settings

    picked = chosen_engine(Settings.from_env({}, model=TEST_MODEL))
    return request.getfixturevalue("tiny_llamacpp_engine" if picked == "llamacpp" else "tiny_engine")
