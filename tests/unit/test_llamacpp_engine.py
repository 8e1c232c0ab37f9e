"""The llama.cpp back end's pure parts: the server it starts (slots, threads, context, loopback and a free port), how
a check's P(yes) is read by token id, the GGUF it runs, and what `JUIZ_ENGINE=auto` picks (GPU mocked)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import cast

import pytest

from juiz.engines import models
from juiz.engines.base import GenerationRequest
from juiz.engines.llamacpp_engine import (
    BATCH_TOKENS,
    LlamaCppEngine,
    common_params,
    first_position_by_id,
    group_probs_from_ids,
    quantisation_name,
    server_config,
)
from juiz.judging.backend import chosen_engine
from juiz.judging.checks import CHECK_REQUEST
from juiz.judging.plan import COT_REQUEST
from juiz.runtime.errors import ModelError
from juiz.runtime.settings import Settings


def test_slots_and_threads_default_to_the_cores_and_each_slot_holds_a_whole_context() -> None:
    config = server_config(Path("m.gguf"), "judge", max_model_len=4096, cores=6)
    assert (config.slots, config.threads, config.slot_context, config.kv_tokens) == (6, 6, 4096, 6 * 4096)
    set_by_hand = server_config(Path("m.gguf"), "judge", max_model_len=2048, slots=3, threads=2, cores=6)
    assert (set_by_hand.slots, set_by_hand.threads, set_by_hand.kv_tokens) == (3, 2, 3 * 2048)


def test_the_server_listens_on_loopback_on_a_port_the_kernel_picks_with_prompt_caching() -> None:
    pytest.importorskip("xllamacpp")
    config = server_config(Path("/m/model.gguf"), "judge", max_model_len=1024, cache_ram_mib=64, cores=2)
    params = common_params(config)
    assert params.hostnames == ["127.0.0.1"] and params.port == 0
    assert params.model.path == "/m/model.gguf" and params.model_alias == {"judge"}
    assert params.n_parallel == 2 and params.n_ctx == 2048 and params.kv_unified is False
    assert params.cache_prompt is True and params.cache_ram_mib == 64
    assert params.cpuparams.n_threads == 2 and params.cpuparams_batch.n_threads == 2
    assert params.n_threads_http >= 2 * 2  # every request in flight is taken in and queued by the server
    # A step of 256 prompt tokens (llama.cpp's own is 2,048): a streamed prompt reports its progress once a step.
    assert (params.n_batch, params.n_ubatch) == (BATCH_TOKENS, 256)


def test_the_step_is_the_settings_and_0_leaves_llama_cpps_own() -> None:
    pytest.importorskip("xllamacpp")
    import xllamacpp

    small = common_params(server_config(Path("m.gguf"), "judge", max_model_len=1024, batch_tokens=256, cores=2))
    assert (small.n_batch, small.n_ubatch) == (256, 256)  # a step computes no more than it holds
    own = common_params(server_config(Path("m.gguf"), "judge", max_model_len=1024, batch_tokens=0, cores=2))
    defaults = xllamacpp.CommonParams()
    assert (own.n_batch, own.n_ubatch) == (defaults.n_batch, defaults.n_ubatch)
    assert Settings.from_env({"JUIZ_LLAMACPP_BATCH_TOKENS": "1024"}).llamacpp_batch_tokens == 1024


def test_weights_are_repacked_only_when_the_settings_ask() -> None:
    pytest.importorskip("xllamacpp")
    plain = common_params(server_config(Path("m.gguf"), "judge", max_model_len=1024, cores=2))
    repacked = common_params(server_config(Path("m.gguf"), "judge", max_model_len=1024, repack=True, cores=2))
    assert plain.no_extra_bufts is True and repacked.no_extra_bufts is False
    assert Settings.from_env({}).llamacpp_repack is False
    assert Settings.from_env({"JUIZ_LLAMACPP_REPACK": "true"}).llamacpp_repack is True


@pytest.mark.parametrize(
    ("request_", "streamed"),
    [(CHECK_REQUEST, True), (COT_REQUEST, True), (dataclasses.replace(COT_REQUEST, n=3, temperature=1.0), False)],
    ids=["a one-token check", "a long reply", "several samples"],
)
def test_every_single_reply_streams_for_its_prompt_progress(request_: GenerationRequest, streamed: bool) -> None:
    """Called unbound: `streams` reads nothing of a started server."""
    assert LlamaCppEngine.streams(cast(LlamaCppEngine, None), request_) is streamed


@pytest.mark.parametrize(
    ("file_type", "name"),
    [("Q4_K - Medium", "Q4_K_M"), ("Q4_1", "Q4_1"), ("Q5_K - Small", "Q5_K_S"), ("BF16", "BF16")],
)
def test_quantisation_names_are_the_ones_gguf_files_go_by(file_type: str, name: str) -> None:
    assert quantisation_name(file_type) == name


def _body(candidates: list[tuple[int, str, float]]) -> dict[str, object]:
    top = [{"id": i, "token": text, "logprob": lp} for i, text, lp in candidates]
    position = {"token": "Yes", "top_logprobs": top}
    return {"choices": [{"message": {"content": "Yes"}, "logprobs": {"content": [position]}}]}


def test_p_yes_is_summed_over_the_groups_token_ids_whatever_their_text() -> None:
    body = _body([(1, "Yes", math.log(0.6)), (2, " yes", math.log(0.1)), (3, "No", math.log(0.2)), (9, "yes!", -1.0)])
    position = first_position_by_id(body)
    probs = group_probs_from_ids(position, [[1, 2, 5], [3, 4]])  # 5 and 4: not among the candidates, nothing added
    assert probs is not None
    assert probs[0] == pytest.approx(0.7) and probs[1] == pytest.approx(0.2)


def test_a_reply_without_log_probabilities_reads_no_p_yes_rather_than_zero() -> None:
    body = {"choices": [{"message": {"content": "Yes"}}]}
    assert group_probs_from_ids(first_position_by_id(body), [[1], [2]]) is None


def test_a_pulled_development_model_keeps_its_gguf_and_llama_cpp_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models, "model_dir", lambda name: tmp_path / name)
    name = models.TEST_MODEL
    assert models.find_gguf(name) is None
    with pytest.raises(ModelError, match="juiz models pull"):
        models.resolve_gguf(name)
    (tmp_path / name).mkdir()
    (tmp_path / name / models.GGUF_NAME).write_bytes(b"GGUF")
    assert models.resolve_gguf(name) == tmp_path / name / models.GGUF_NAME


def test_a_gguf_file_or_a_folder_holding_one_is_found_and_a_hub_id_has_none(tmp_path: Path) -> None:
    assert models.find_gguf("org/judge") is None
    folder = tmp_path / "judge"
    folder.mkdir()
    assert models.find_gguf(str(folder)) is None
    (folder / "judge-q4.gguf").write_bytes(b"GGUF")
    assert models.find_gguf(str(folder)) == folder / "judge-q4.gguf"
    assert models.find_gguf(str(folder / "judge-q4.gguf")) == folder / "judge-q4.gguf"
    (folder / "other.gguf").write_bytes(b"GGUF")
    assert models.find_gguf(str(folder)) is None  # two: which one is not ours to guess


@pytest.mark.parametrize(
    ("gpu", "avx512", "has_gguf", "installed", "picked"),
    [
        (True, False, True, True, "vllm"),
        (False, True, True, True, "vllm"),
        (False, False, True, True, "llamacpp"),
        (False, False, False, True, "vllm"),
        (False, False, True, False, "vllm"),
    ],
    ids=[
        "GPU: vllm",
        "AVX-512 CPU (bf16 or float32): vllm",
        "AVX2 CPU, with a GGUF: llamacpp",
        "CPU, no GGUF: vllm",
        "llama.cpp not installed: vllm",
    ],
)
def test_auto_takes_vllm_on_a_gpu_or_avx512_cpu_and_llama_cpp_on_other_cpus_when_the_model_has_a_gguf(
    gpu: bool, avx512: bool, has_gguf: bool, installed: bool, picked: str, tmp_path: Path
) -> None:
    model = tmp_path / "judge"
    model.mkdir()
    if has_gguf:
        (model / "model.gguf").write_bytes(b"GGUF")
    settings = Settings.from_env({}, model=str(model))
    assert settings.engine == "auto"  # the default
    assert chosen_engine(settings, gpu=lambda: gpu, llamacpp=lambda: installed, wide_vectors=lambda: avx512) == picked


@pytest.mark.parametrize("named", ["vllm", "llamacpp"])
def test_a_named_back_end_is_taken_whatever_the_device(named: str, tmp_path: Path) -> None:
    settings = Settings.from_env({}, model=str(tmp_path), engine=named)
    assert chosen_engine(settings, gpu=lambda: True, llamacpp=lambda: True) == named
    assert chosen_engine(settings, gpu=lambda: False, llamacpp=lambda: True) == named
