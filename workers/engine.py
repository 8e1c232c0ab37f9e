"""The worker's judge engine, built once per process before it connects to Redis."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from juiz.settings import Settings
from juiz.vllm_engine import VLLMEngine

if TYPE_CHECKING:  # imported where used: the in-process engine's workers never load the server back end
    from juiz.openai_engine import OpenAIEngine

log = logging.getLogger(__name__)


def build_engine(settings: Settings) -> VLLMEngine | OpenAIEngine:
    """The real engine: vLLM in this process on the configured model, or (JUIZ_ENGINE=openai) a client of an
    OpenAI-compatible server serving it. Never a fake."""
    from juiz.judge import Judge
    from juiz.models import resolve_model

    if settings.engine == "openai":
        from juiz.openai_engine import build_openai_engine

        server = build_openai_engine(settings)
        warm = Judge(server).warm_up()
        log.info("judge server %s ready (format by %s); warmed up in %.1fs", server.base_url, server.dialect, warm)
        return server
    engine = VLLMEngine(resolve_model(settings.model), model_id=settings.model, max_model_len=settings.max_model_len)
    log.info("engine up in %.1fs; reply grammar compiled in %.1fs", engine.startup_s, Judge(engine).warm_up())
    return engine
