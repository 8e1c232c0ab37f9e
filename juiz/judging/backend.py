"""The judge back end the settings choose, started once and warmed up: the one builder `juiz score` and `juiz check`
(juiz.cli) and the worker (workers.worker) share.

`JUIZ_ENGINE` picks it: `vllm` loads the model in this process (`JUIZ_MODEL`, `JUIZ_MAX_MODEL_LEN`, `JUIZ_DTYPE`,
`JUIZ_ENFORCE_EAGER`; "auto" leaves the dtype and eager mode to juiz.engines.vllm_engine, by device), `openai` is a
client of
an OpenAI-compatible server (`JUIZ_ENGINE_BASE_URL`, `JUIZ_ENGINE_MODEL`, ...). There is no third choice and no
fallback: a fake engine is only ever built by name (tests, the fake worker). A bad choice is the settings'
InputError, raised before anything starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from juiz.engines.models import resolve_model
from juiz.judging.judge import Judge
from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings

if TYPE_CHECKING:  # imported where used: a process on one back end never imports the other
    from juiz.engines.openai_server import OpenAIEngine
    from juiz.engines.vllm_engine import VLLMEngine

log = logging.getLogger(__name__)

Say = Callable[[str], object]


def build_engine(settings: Settings, say: Say = log.info) -> VLLMEngine | OpenAIEngine:
    """The real engine `settings.engine` names, warmed up (its reply grammars compiled) before it is returned.

    `say` gets a line before the start (which can take minutes) and one when the engine is ready: the worker logs
    them, the CLI prints them for the person waiting.
    """
    if settings.engine == "vllm":
        return _in_process_engine(settings, say)
    if settings.engine == "openai":
        return _server_engine(settings, say)
    # Settings' validation makes this unreachable; a back end added there but not here must not start vLLM instead.
    raise InputError(f"unknown judge back end {settings.engine!r}: expected vllm or openai", source="JUIZ_ENGINE")


def _in_process_engine(settings: Settings, say: Say) -> VLLMEngine:
    from juiz.engines.vllm_engine import VLLMEngine

    say(f"loading judge model {settings.model} …")
    engine = VLLMEngine(
        resolve_model(settings.model),
        model_id=settings.model,
        max_model_len=settings.max_model_len,
        dtype=settings.dtype,
        enforce_eager=None if settings.enforce_eager == "auto" else settings.enforce_eager == "1",
    )
    warm = Judge(engine).warm_up()
    say(f"engine ready in {engine.startup_s:.1f}s (+{warm:.1f}s to compile the reply grammar)")
    return engine


def _server_engine(settings: Settings, say: Say) -> OpenAIEngine:
    from juiz.engines.openai_server import build_openai_engine

    say(f"judge server {settings.engine_base_url} …")
    engine = build_openai_engine(settings)
    warm = Judge(engine).warm_up()
    say(f"judge server ready: model {engine.model_id}, reply format by {engine.dialect} ({warm:.1f}s)")
    return engine
