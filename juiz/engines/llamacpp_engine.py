"""llama.cpp in process: the GGUF as it ships (Q4_K_M for the development judge), on the CPU.

The `xllamacpp` wheel embeds llama.cpp's OpenAI-compatible HTTP server; `LlamaCppEngine` starts it inside this
process on 127.0.0.1 (a port the kernel picks), so its threads die with the worker whatever kills it, and talks to it
as `OpenAIEngine` talks to any such server: the same requests, the reply grammar as GBNF, concurrency, cancellation
and retries. What differs from a remote server:

- the server's slots (parallel sequences, each with its own prompt cache) are sized to the cores, and each holds a
  whole context of `max_model_len` tokens, so the KV cache is `slots × max_model_len` tokens, allocated at start-up;
- each call's conversations are planned over the slots (juiz.engines.slots) and pinned there with `id_slot`: a slot
  serves from cache only what its new prompt shares with its last one, so prompts sharing a prefix go one after
  another to one slot (the server's own choice split them over both, each computing the prefix);
- every request someone listens to is streamed with llama.cpp's prompt progress, a one-token check too (its prompt
  is all of its time), and the server computes at most `batch_tokens` prompt tokens a step (its `n_batch`), so a long
  prompt reports its progress every few seconds rather than once;
- a check's P(yes) is read by token id, as the in-process vLLM engine reads it: the ids of every spelling of each word
  that the model's tokenizer writes as one token, looked up among the first position's top `WORD_TOP_LOGPROBS`
  candidates (llama.cpp has no "log-probabilities of these ids"; an id beyond them is below the last one read);
- results record `engine=llamacpp` and the GGUF's quantisation, not a host: the server is this process's own.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx

from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest, spellings
from juiz.engines.openai_server import OpenAIEngine, completion_from_choice
from juiz.engines.slots import plan_slots, prompt_text
from juiz.runtime.errors import EngineDeadError, EngineError, ModelError

log = logging.getLogger(__name__)

BACKEND = "llamacpp"
# Candidates read at a check's first reply token. llama.cpp sorts the whole vocabulary for them either way; past the
# 100th candidate a token's probability is below 1e-3 on the development judge's check prompts.
WORD_TOP_LOGPROBS = 100
# Requests in flight per slot. One: the server defers a request for a busy slot, and when any slot frees it retries
# the oldest deferred one, deferring it again at the back if its slot is still busy, so a second request in flight could
# run after the next one sent: an item's last check after another kind's prompt had replaced the item in the slot, its
# context computed again. The client's round trip between two requests is milliseconds; a check is seconds.
REQUESTS_PER_SLOT = 1
# A request to our own server waits for the one ahead of it in its slot: on a busy 2-core machine a 1.5B judge's
# long prompt took minutes. A call's deadline (CallControl) still bounds it; this only catches a server that hangs.
LOCAL_REQUEST_TIMEOUT_S = 3600.0
# Prompt tokens the server computes in one step (llama.cpp's `n_batch`, and so its `n_ubatch`; its defaults are 2,048
# and 512): a streamed prompt's progress comes once a step. On a 2-core AVX2 CPU, where `auto` runs llama.cpp, 512
# tokens of the 1.5B judge's prompt took 16-22 s and 256 took 8-9 s, at no cost in speed (bench.llamacpp_step).
BATCH_TOKENS = 256
# A server whose slots are busy and whose counters (prompt tokens read, tokens written) have not moved for this long
# has hung (a slot can stick mid-prompt while the server's loop spins). A step of 256 prompt tokens takes 8-9 s on a
# 2-core AVX2 CPU, the slowest seen, so this is over 30 steps.
STALL_S = 300.0
SLOTS_EVERY_S = 15.0  # how often a call asks the server for its slots' counters (GET /slots)
# llama.cpp's names of its quantisation types (`general.file_type`) → the names its GGUF files go by.
_QUANT_NAMES = {" - Small": "_S", " - Medium": "_M", " - Large": "_L"}


@dataclass(frozen=True)
class ServerConfig:
    """What the embedded server is started with; `server_config` derives it from the settings and the machine."""

    gguf: Path
    model_id: str
    slots: int
    slot_context: int  # tokens of KV cache per slot: a prompt and its reply must fit
    threads: int
    cache_ram_mib: int  # host memory for prompts a slot swapped out (llama.cpp's prompt cache in RAM)
    batch_tokens: int = BATCH_TOKENS  # prompt tokens computed in one step, over all slots (n_batch)
    repack: bool = False  # weights re-laid out at load for the CPU's vector kernels (llama.cpp's "extra buffers")

    @property
    def kv_tokens(self) -> int:
        return self.slots * self.slot_context


def server_config(
    gguf: Path,
    model_id: str,
    *,
    max_model_len: int,
    slots: int = 0,
    threads: int = 0,
    cache_ram_mib: int = 0,
    batch_tokens: int = BATCH_TOKENS,
    repack: bool = False,
    cores: int | None = None,
) -> ServerConfig:
    """The server for this machine: `slots` and `threads` 0 mean one per core; `batch_tokens` 0 means llama.cpp's
    own step (2,048)."""
    cores = cores or os.cpu_count() or 1
    return ServerConfig(
        gguf=gguf,
        model_id=model_id,
        slots=slots or cores,
        slot_context=max_model_len,
        threads=threads or cores,
        cache_ram_mib=cache_ram_mib,
        batch_tokens=batch_tokens,
        repack=repack,
    )


def quantisation_name(file_type: str) -> str:
    """llama.cpp's description of a GGUF's type ("Q4_K - Medium") as its usual name ("Q4_K_M")."""
    for long, short in _QUANT_NAMES.items():
        if file_type.endswith(long):
            return file_type.removesuffix(long) + short
    return file_type


def common_params(config: ServerConfig) -> Any:
    """xllamacpp's `CommonParams` for the config: loopback, a free port, prompt caching, no web page."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(config.gguf)
    params.model_alias = {config.model_id}  # the name requests and /v1/models use
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # the kernel picks a free one; `Server.listening_address` says which
    params.n_parallel = config.slots
    params.n_ctx = config.kv_tokens  # split evenly between the slots
    params.kv_unified = False  # each slot's context is its own: one long item can't starve the others
    params.cache_prompt = True
    params.cache_ram_mib = config.cache_ram_mib
    if config.batch_tokens:
        params.n_batch = config.batch_tokens
        params.n_ubatch = min(params.n_ubatch, config.batch_tokens)  # llama.cpp's own rule, said outright
    params.no_extra_bufts = not config.repack
    params.cpuparams.n_threads = config.threads
    params.cpuparams_batch.n_threads = config.threads
    params.n_threads_http = config.slots * REQUESTS_PER_SLOT + 2
    params.n_gpu_layers = 0
    params.ui = False
    params.endpoint_metrics = False
    # llama.cpp logs every request and slot; silent unless juiz logs at DEBUG (a failed load still raises).
    params.verbosity = 0 if log.isEnabledFor(logging.DEBUG) else -1
    return params


class LlamaCppEngine(OpenAIEngine):
    """llama.cpp's server in this process, and the OpenAI-compatible client that talks to it."""

    backend = BACKEND
    # A streamed request hears its prompt's processing (`prompt_progress`, processed and cached tokens) once a step.
    STREAM_EXTRAS: Mapping[str, Any] = MappingProxyType({"return_progress": True})

    def __init__(self, config: ServerConfig, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not config.gguf.is_file():
            raise ModelError(f"GGUF file does not exist: {config.gguf}")
        try:
            import xllamacpp
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineError("llama.cpp is not installed: install `xllamacpp`") from exc
        started = time.perf_counter()
        try:
            self._server: Any = xllamacpp.Server(common_params(config))
        except Exception as exc:
            raise ModelError(f"llama.cpp could not load {config.gguf}: {exc}") from exc
        self.config = config
        self.address = str(self._server.listening_address)
        self._token_groups: dict[tuple[tuple[str, ...], ...], list[list[int]]] = {}
        self._held = [""] * config.slots  # the prompt each slot last computed, as far as this client planned it
        try:
            super().__init__(
                self.address + "/v1",
                config.model_id,
                dialect="llama.cpp",
                max_concurrency=config.slots * REQUESTS_PER_SLOT,
                timeout_s=LOCAL_REQUEST_TIMEOUT_S,
                transport=transport,
            )
            self.quantisation = self._quantisation()
        except BaseException:
            self._stop_server()
            raise
        self.startup_s = time.perf_counter() - started
        log.info(
            "llama.cpp engine ready: %s (%s), %d slot(s) × %d tokens, %d thread(s), in %.1fs",
            config.gguf,
            self.quantisation,
            config.slots,
            config.slot_context,
            config.threads,
            self.startup_s,
        )

    def streams(self, request: GenerationRequest) -> bool:
        """Every single reply: a long one's tokens move the progress as they are written, and any prompt's
        processing as it goes (a one-token check's whole time). The server streams the completion it returns
        unstreamed, top log-probabilities with their token ids included (tests/engine/test_llamacpp_engine.py)."""
        return request.n == 1

    @property
    def origin(self) -> Mapping[str, str]:
        """The back end and the weights' quantisation: a grade is reproducible only on the same ones."""
        return {"engine": self.backend, "engine_quantisation": self.quantisation}

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._stop_server()

    def _stop_server(self) -> None:
        server, self._server = getattr(self, "_server", None), None
        del server  # xllamacpp's Server stops its threads and frees the model when it is collected

    def _quantisation(self) -> str:
        response = httpx.get(self.address + "/v1/models", timeout=10.0)
        for model in response.json().get("data") or []:
            file_type = str((model.get("meta") or {}).get("ftype") or "")
            if file_type:
                return quantisation_name(file_type)
        return "unknown"

    # --- which slot computes what, in what order (juiz.engines.slots) --------------------------------------------

    lane_depth = REQUESTS_PER_SLOT

    def lanes(self, conversations: Sequence[Conversation]) -> list[list[int]] | None:
        """Each slot's conversations, planned so those sharing a prefix follow each other in one slot. A request left
        to the server would go to whichever slot is free, and an item's checks, split over both slots, computed its
        prefix in each, or lost it to another item's."""
        texts = [prompt_text(conversation) for conversation in conversations]
        plan = plan_slots(texts, self._held)
        self._held = [texts[lane[-1]] if lane else held for lane, held in zip(plan, self._held, strict=True)]
        return plan

    def in_lane(self, body: dict[str, Any], lane: int) -> dict[str, Any]:
        return body | {"id_slot": lane}

    # --- a check's P(yes), by token id --------------------------------------------------------------------------

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        """The call, watched: a server that stops computing aborts it and ends this engine (EngineDeadError), so the
        worker replaces it instead of waiting for the hour-long request timeout."""
        if request.word_groups and conversations:
            self.token_groups(request.word_groups)  # looked up before the call, outside its event loop
        with SlotWatch(self._slots) as watch:
            completions = super().generate(conversations, request, watch.control(control, len(conversations)))
        if watch.stalled is not None:
            raise EngineDeadError(f"llama.cpp's server stopped computing: {watch.stalled}")
        return completions

    def _slots(self) -> list[dict[str, Any]]:
        response = httpx.get(self.address + "/slots", timeout=SLOTS_EVERY_S * 2)
        response.raise_for_status()
        slots = response.json()
        return slots if isinstance(slots, list) else []

    def token_groups(self, word_groups: tuple[tuple[str, ...], ...]) -> list[list[int]]:
        """Token ids of every spelling of each group's words that the model writes as ONE token (as the vLLM engine
        reads them: a word split into several tokens can't be read at one position)."""
        cached = self._token_groups.get(word_groups)
        if cached is not None:
            return cached
        groups: list[list[int]] = []
        seen: set[int] = set()
        with httpx.Client(base_url=self.address, timeout=30.0) as client:
            for words in word_groups:
                ids = []
                for word in words:
                    for form in spellings(word):
                        response = client.post("/tokenize", json={"content": form, "add_special": False})
                        response.raise_for_status()
                        encoded = response.json().get("tokens") or []
                        if len(encoded) == 1 and int(encoded[0]) not in seen:
                            seen.add(int(encoded[0]))
                            ids.append(int(encoded[0]))
                groups.append(ids)
        self._token_groups[word_groups] = groups
        return groups

    def body(self, conversation: Conversation, request: GenerationRequest) -> dict[str, Any]:
        body = super().body(conversation, request)
        if request.word_groups:
            body["top_logprobs"] = WORD_TOP_LOGPROBS
        return body

    def completion(self, body: dict[str, Any], word_groups: tuple[tuple[str, ...], ...]) -> Completion:
        result = completion_from_choice(body)
        if word_groups:
            result.word_probs = group_probs_from_ids(first_position_by_id(body), self.token_groups(word_groups))
        return result


def first_position_by_id(body: dict[str, Any]) -> dict[int, float] | None:
    """{token id: log-probability} of the first generated position's candidates, or None when the server sent none."""
    positions = (body["choices"][0].get("logprobs") or {}).get("content") or []
    if not positions:
        return None
    return {
        int(candidate["id"]): float(candidate["logprob"])
        for candidate in positions[0].get("top_logprobs") or []
        if "id" in candidate and "logprob" in candidate
    }


def group_probs_from_ids(
    position: dict[int, float] | None, token_groups: Sequence[Sequence[int]]
) -> tuple[float, ...] | None:
    """Each group's probability: the sum over its token ids among the candidates (an id not among them adds
    nothing: it is less likely than every candidate read). None when the position was not read."""
    if position is None:
        return None
    return tuple(min(1.0, sum(math.exp(position[i]) for i in group if i in position)) for group in token_groups)


class SlotWatch:
    """Asks the server for its slots' counters every `every_s` while a call runs (a thread of its own: /slots waits for
    the server's current step); `stalled` says why once slots have been busy with no counter moving for `stall_s`.
    A server that can't answer /slots tells nothing: only counters seen standing still count."""

    def __init__(
        self,
        read_slots: Callable[[], list[dict[str, Any]]],
        stall_s: float = STALL_S,
        every_s: float = SLOTS_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read, self._stall_s, self._every_s, self._clock = read_slots, stall_s, every_s, clock
        self._last: tuple[object, ...] | None = None
        self._since = clock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llama.cpp slot watch", daemon=True)
        self.stalled: str | None = None

    def __enter__(self) -> SlotWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()  # not joined: a /slots read in flight ends on its own, and the call needn't wait for it

    def _run(self) -> None:
        while not self._stop.wait(self._every_s) and self.stalled is None:
            try:
                slots = self._read()
            except (httpx.HTTPError, ValueError) as exc:
                log.debug("llama.cpp /slots did not answer: %s", exc)
                continue
            self.observe(slots)

    def observe(self, slots: list[dict[str, Any]]) -> None:
        """One reading of /slots: the counters standing still while a slot is busy for `stall_s` is a hang."""
        now = self._clock()
        busy = [s for s in slots if s.get("is_processing")]
        counters = tuple(
            (s.get("id"), s.get("id_task"), s.get("n_prompt_tokens_processed"), _decoded(s)) for s in slots
        )
        if not busy or counters != self._last:
            self._last, self._since = counters, now
            return
        if now - self._since >= self._stall_s:
            where = ", ".join(
                f"slot {s.get('id')} task {s.get('id_task')} at {s.get('n_prompt_tokens_processed')} of "
                f"{s.get('n_prompt_tokens')} prompt tokens"
                for s in busy
            )
            self.stalled = f"{where}, nothing moved for {now - self._since:.0f} s"
            log.error("llama.cpp's server hung: %s", self.stalled)

    def control(self, control: CallControl | None, size: int) -> CallControl:
        """`control` with every request of the call aborted once the server has hung."""
        base = control or CallControl()
        asked = base.cancelled

        def cancelled() -> list[int]:
            if self.stalled is not None:
                return list(range(size))
            return list(asked()) if asked is not None else []

        return replace(base, cancelled=cancelled)


def _decoded(slot: Mapping[str, Any]) -> object:
    token = slot.get("next_token")
    if isinstance(token, list):
        return tuple(t.get("n_decoded") for t in token if isinstance(t, dict))
    return token.get("n_decoded") if isinstance(token, dict) else None
