"""The judge back end the settings choose, started once and warmed up: the one builder `juiz score` and `juiz check`
(juiz.cli) and the worker (workers.worker) share.

`JUIZ_ENGINE` picks it: `vllm` loads the model in this process (`JUIZ_MODEL`, `JUIZ_MAX_MODEL_LEN`, `JUIZ_DTYPE`,
`JUIZ_ENFORCE_EAGER`; "auto" leaves the dtype and eager mode to juiz.engines.vllm_engine, by device), `llamacpp` runs
the model's GGUF with llama.cpp in this process (`JUIZ_LLAMACPP_*`), `openai` is a client of an OpenAI-compatible
server (`JUIZ_ENGINE_BASE_URL`, `JUIZ_ENGINE_MODEL`, ...). `auto` (the default) is decided once, before anything
starts (`chosen_engine`): vLLM where a CUDA GPU is present or the CPU has AVX-512 (bf16 where it computes bf16
natively, float32 where not: on both, vLLM's kernels graded faster than llama.cpp's Q4 ones, bench.engines), llama.cpp
on other CPUs (AVX2) when the model has a GGUF (its quantised weights: a quarter of the memory and bytes per token of
vLLM's float32, and a faster prompt there), else vLLM. There is no fallback after that: a back end that fails to
start fails, and a fake engine is only ever built by name (tests, the fake worker). A bad choice is the settings'
InputError, raised before anything starts.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from juiz.engines.cpu import avx512
from juiz.engines.models import find_gguf, resolve_gguf, resolve_model
from juiz.judging.judge import Judge
from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings

if TYPE_CHECKING:  # imported where used: a process on one back end never imports the other
    from juiz.engines.llamacpp_engine import LlamaCppEngine
    from juiz.engines.openai_server import OpenAIEngine
    from juiz.engines.vllm_engine import VLLMEngine

log = logging.getLogger(__name__)

Say = Callable[[str], object]
Backend = Literal["vllm", "llamacpp", "openai"]


def cuda_present() -> bool:
    """Whether an NVIDIA GPU is visible to this process, without importing torch (seconds and a few hundred MB for
    a process that then runs llama.cpp): the driver's device files, unless CUDA_VISIBLE_DEVICES hides them all."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*"))


def llamacpp_installed() -> bool:
    return importlib.util.find_spec("xllamacpp") is not None


def chosen_engine(
    settings: Settings,
    *,
    gpu: Callable[[], bool] = cuda_present,
    llamacpp: Callable[[], bool] = llamacpp_installed,
    wide_vectors: Callable[[], bool] = avx512,
) -> Backend:
    """The back end `settings.engine` names; for `auto`: vllm on a GPU or an AVX-512 CPU, llamacpp on another CPU when
    the model has a GGUF (and llama.cpp is installed), else vllm."""
    if settings.engine != "auto":
        return settings.engine
    if gpu() or wide_vectors():
        return "vllm"
    if find_gguf(settings.model) is not None and llamacpp():
        return "llamacpp"
    return "vllm"


def build_engine(settings: Settings, say: Say = log.info) -> VLLMEngine | LlamaCppEngine | OpenAIEngine:
    """The real engine `settings.engine` names, warmed up (its reply grammars compiled) before it is returned.

    `say` gets a line before the start (which can take minutes) and one when the engine is ready: the worker logs
    them, the CLI prints them for the person waiting.
    """
    backend = chosen_engine(settings)
    if backend == "vllm":
        return _in_process_engine(settings, say)
    if backend == "llamacpp":
        return _llamacpp_engine(settings, say)
    if backend == "openai":
        return _server_engine(settings, say)
    # Settings' validation makes this unreachable; a back end added there but not here must not start vLLM instead.
    raise InputError(
        f"unknown judge back end {settings.engine!r}: expected auto, vllm, llamacpp or openai", source="JUIZ_ENGINE"
    )


def _in_process_engine(settings: Settings, say: Say) -> VLLMEngine:
    from juiz.engines.vllm_engine import VLLMEngine

    say(f"loading judge model {settings.model} …")
    engine = VLLMEngine(
        resolve_model(settings.model),
        model_id=settings.model,
        max_model_len=settings.max_model_len,
        dtype=settings.dtype,
        enforce_eager=None if settings.enforce_eager == "auto" else settings.enforce_eager == "1",
        cpu_kv_cache_gib=settings.cpu_kv_cache_gib,
        cpu_step_tokens=settings.cpu_step_tokens,
    )
    warm = Judge(engine).warm_up()
    say(f"engine ready in {engine.startup_s:.1f}s (+{warm:.1f}s to compile the reply grammar)")
    return engine


def _llamacpp_engine(settings: Settings, say: Say) -> LlamaCppEngine:
    from juiz.engines.llamacpp_engine import LlamaCppEngine, server_config

    gguf = resolve_gguf(settings.model)
    say(f"loading judge model {settings.model} with llama.cpp ({gguf.name}) …")
    engine = LlamaCppEngine(
        server_config(
            gguf,
            settings.model,
            max_model_len=settings.max_model_len,
            slots=settings.llamacpp_slots,
            threads=settings.llamacpp_threads,
            cache_ram_mib=settings.llamacpp_cache_ram_mib,
            batch_tokens=settings.llamacpp_batch_tokens,
            repack=settings.llamacpp_repack,
        )
    )
    warm = Judge(engine).warm_up()
    say(
        f"engine ready in {engine.startup_s:.1f}s: llama.cpp, {engine.quantisation}, {engine.config.slots} slot(s) "
        f"(+{warm:.1f}s warm-up)"
    )
    return engine


def _server_engine(settings: Settings, say: Say) -> OpenAIEngine:
    from juiz.engines.openai_server import build_openai_engine

    say(f"judge server {settings.engine_base_url} …")
    engine = build_openai_engine(settings)
    warm = Judge(engine).warm_up()
    say(f"judge server ready: model {engine.model_id}, reply format by {engine.dialect} ({warm:.1f}s)")
    return engine
