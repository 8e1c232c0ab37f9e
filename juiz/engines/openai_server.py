"""The judge on any OpenAI-compatible chat-completions server (vLLM's OpenAI server, SGLang, llama.cpp's server, a
hosted API), behind the same `JudgeEngine` Protocol as the in-process vLLM engine.

Same prompts, same chat messages, same parser. What differs is only how a call reaches the model:

- Every conversation is one `POST {base_url}/chat/completions`; all of a call's requests are in flight together (at
  most `max_concurrency`, an asyncio semaphore over one httpx.AsyncClient), so the server batches them itself. An
  engine whose server keeps a cache per slot may queue them in `lanes` instead (LlamaCppEngine: one per slot).
- The reply format is enforced where the server can: vLLM's `structured_outputs` request extension (`regex` /
  `choice`, vLLM 0.32 field names) or llama.cpp's `grammar` (GBNF). Elsewhere (`dialect="none"`: SGLang, hosted
  APIs) the reply is free text read by the same parser, and a reply off the template is a `parse_error`, never a 0.
  `dialect="auto"` reads `owned_by` from `GET /models` (vLLM says "vllm", llama.cpp "llamacpp").
- Log-probabilities are asked for (`logprobs` + `top_logprobs`); a server that gives none yields a null expected
  score, never a made-up one.
- Transient faults (connection errors, 429 honouring Retry-After, 5xx) are retried with backoff by tenacity;
  permanent ones (other 4xx) fail that one item with the server's reason. A call in which *every* request failed
  transiently raises `TransientEngineError` (the server is down: the worker retries the chunk later).
- `CallControl`: at its deadline, or when `cancelled()` names an index, the request's task is cancelled, which
  closes its HTTP connection; vLLM's server aborts a request whose client went away, so no work is left behind.
- Tokens (`CallControl.on_tokens`): a request reports its reply and the prompt tokens the server computed (its
  `usage`) as it returns. An engine whose server streams the completion it returns unstreamed (`streams`: llama.cpp's
  own) sends a request as a stream when someone listens, reports each chunk's tokens as it arrives (and the server's
  prompt-processing progress, `STREAM_EXTRAS`), and assembles the same chat completion the non-streamed request
  returns. A one-token reply (a check-based call's bulk) streams too where the stream reports the prompt's progress:
  its prompt is all of its time.

`generate` is synchronous (the Protocol's). Every call runs on the engine's one event loop (an `asyncio.Runner` kept
for the engine's life), so one httpx.AsyncClient serves them all and its kept-alive connections outlast a call (an
AsyncClient is bound to the loop it first ran on); `close()` lets both go. Calls from several threads take turns.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
)

from juiz.engines.base import (
    CANCELLED,
    CallControl,
    Completion,
    Conversation,
    GenerationRequest,
    aborted,
    group_probs_from_text,
)
from juiz.runtime.errors import EngineError, JuizError, ModelError, TransientEngineError
from juiz.runtime.retry import WaitRetryAfter, retry_after_s

if TYPE_CHECKING:
    from juiz.runtime.settings import Settings

log = logging.getLogger(__name__)

BACKEND = "openai"
Dialect = Literal["auto", "vllm", "llama.cpp", "none"]
DIALECTS: tuple[str, ...] = ("auto", "vllm", "llama.cpp", "none")
_OWNED_BY = {"vllm": "vllm", "llamacpp": "llama.cpp"}
# Servers write an impossible token's log-probability as a large negative number (vLLM: -9999.0), JSON having no -inf.
_IMPOSSIBLE_LOGPROB = -9000.0
# The most candidates per position the OpenAI API returns (`top_logprobs` ≤ 20).
OPENAI_MAX_TOP_LOGPROBS = 20


def _gbnf_for(request: GenerationRequest) -> str | None:
    """The request's reply format in GBNF: its choices, or the grammar it carries beside its regex. A regex without a
    grammar goes unenforced on llama.cpp and is read by the parser."""
    if request.choice is not None:
        return "root ::= " + " | ".join('"' + c.replace("\\", "\\\\").replace('"', '\\"') + '"' for c in request.choice)
    return request.grammar


class ServerError(JuizError):
    """One HTTP answer that is not a completion: `transient` ones are retried, the others fail their item."""

    def __init__(self, status_code: int, reason: str, retry_after_s: float | None = None) -> None:
        self.status_code = status_code
        self.reason = reason
        self.retry_after_s = retry_after_s
        super().__init__(f"HTTP {status_code} from the judge server: {reason}")

    @property
    def transient(self) -> bool:
        return self.status_code == 429 or self.status_code >= 500


def is_transient(exc: BaseException) -> bool:
    """Worth another try: the connection failed or timed out, or the server said 429/5xx."""
    if isinstance(exc, ServerError):
        return exc.transient
    return isinstance(exc, httpx.TransportError)


def _reason(response: httpx.Response) -> str:
    """The server's own message (OpenAI's `{"error": {"message"}}`, vLLM's, or the raw text), kept short."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or error.get("detail") or error)[:500]
        if isinstance(body.get("message"), str):
            return str(body["message"])[:500]
        return str(error)[:500]
    return str(body)[:500]


def completion_from_choice(body: dict[str, Any], word_groups: tuple[tuple[str, ...], ...] = ()) -> Completion:
    """One chat-completions response → Completion; tokens and top log-probabilities only where the server sent them.

    With `word_groups`, each group's probability is summed from the first position's top log-probabilities: an
    OpenAI-compatible server returns at most 20 candidates, so mass a model spread beyond them is missing (the check
    then reads as low mass rather than a guess)."""
    choice = body["choices"][0]
    text = (choice.get("message") or {}).get("content") or ""
    tokens: list[str] = []
    top: list[dict[str, float]] = []
    for position in (choice.get("logprobs") or {}).get("content") or []:
        tokens.append(position.get("token", ""))
        candidates: dict[str, float] = {}
        for candidate in position.get("top_logprobs") or []:
            logprob = float(candidate.get("logprob", -math.inf))
            if logprob > _IMPOSSIBLE_LOGPROB:
                token = candidate.get("token", "")
                candidates[token] = max(candidates.get(token, -math.inf), logprob)
        top.append(candidates)
    usage = body.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    word_probs = group_probs_from_text(top[0], word_groups) if word_groups and top else None
    return Completion(
        word_probs=word_probs,
        text=text,
        tokens=tokens,
        top_logprobs=top,
        finish_reason=choice.get("finish_reason"),
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        cached_prompt_tokens=int(details.get("cached_tokens") or 0),
        reply_tokens=int(usage.get("completion_tokens") or len(tokens)),
    )


class OpenAIEngine:
    """A judge engine that is a client of an OpenAI-compatible chat-completions server."""

    backend = BACKEND
    # What a streamed request adds to its body (see `streams`).
    STREAM_EXTRAS: Mapping[str, Any] = MappingProxyType({})

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: SecretStr | str | None = None,
        dialect: Dialect = "auto",
        max_concurrency: int = 64,
        timeout_s: float = 600.0,
        attempts: int = 5,
        max_retry_s: float = 300.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`base_url` ends where `/chat/completions` is appended (e.g. http://host:8000/v1). `transport` replaces
        the network in tests (httpx.MockTransport). Checks the server serves `model`; raises ModelError if not, and
        TransientEngineError if the server can't be reached."""
        if dialect not in DIALECTS:
            raise EngineError(f"unknown structured-output dialect {dialect!r}; expected one of {', '.join(DIALECTS)}")
        if max_concurrency < 1:
            raise EngineError("max_concurrency must be at least 1")
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EngineError(f"the judge server's base URL is not an http(s) URL: {base_url!r}")
        self.host: str = parts.hostname
        self._model = model
        secret = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
        self._headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        self._max_concurrency = max_concurrency
        self._timeout = httpx.Timeout(timeout_s, connect=10.0)
        self._attempts = attempts
        self._max_retry_s = max_retry_s
        self._transport = transport
        self._runner = asyncio.Runner()
        self._turn = threading.Lock()  # one call at a time on the engine's loop
        self._http = self._client()
        self._closed = False
        try:
            self.dialect: Dialect = self._runner.run(self._probe(dialect))
        except BaseException:
            self.close()
            raise
        log.info("judge server %s: model %s, reply format enforced by %s", self.base_url, model, self.dialect)

    @property
    def model_id(self) -> str:
        return self._model

    def close(self) -> None:
        """Close the connection pool and the engine's event loop (the worker and the CLI do, when they are done)."""
        with self._turn:
            if self._closed:
                return
            self._closed = True
            try:
                self._runner.run(self._http.aclose())
            finally:
                self._runner.close()

    @property
    def origin(self) -> Mapping[str, str]:
        """What results record about where they were graded: the back end and the server's host (never the key)."""
        return {"engine": self.backend, "engine_host": self.host}

    # --- one call -------------------------------------------------------------------------------------------------

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        if not conversations:
            return []
        with self._turn:
            if self._closed:
                raise EngineError("the judge-server engine is closed")
            try:
                return self._runner.run(self._generate(list(conversations), request, control))
            except BaseException:
                self._cancel_leftovers()
                raise

    def _cancel_leftovers(self) -> None:
        """A call interrupted from outside (RQ's job timeout raises from a signal handler, Ctrl-C) leaves its request
        tasks on the loop, which would resume them in the next call: cancel them now, so their connections close and
        the server aborts them."""
        loop = self._runner.get_loop()
        left = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))

    def _client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=self._max_concurrency, max_keepalive_connections=self._max_concurrency)
        return httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._headers,
            timeout=self._timeout,
            limits=limits,
            transport=self._transport,
        )

    async def _generate(
        self, conversations: list[Conversation], request: GenerationRequest, control: CallControl | None
    ) -> list[Completion]:
        started = time.monotonic()
        semaphore = asyncio.Semaphore(self._max_concurrency)
        listening = control is not None and control.on_tokens is not None
        stream = (listening or request.enough is not None) and self.streams(request)
        bodies = [self.body(conversation, request) for conversation in conversations]
        lanes = self.lanes(conversations)
        if lanes is not None:
            bodies = self._in_lanes(lanes, bodies)
        sends = [
            partial(
                self._one,
                self._http,
                semaphore,
                body,
                request.word_groups,
                tokens=partial(control.tokens, index) if control is not None and listening else None,
                stream=stream,
                enough=request.enough,
            )
            for index, body in enumerate(bodies)
        ]
        tasks = _queued(sends, lanes, self.lane_depth)
        if control is not None and control.on_finished is not None:
            # Each request as it returns (or is aborted): a done callback runs once per task, on this loop's thread.
            told = control.on_finished
            for index, task in enumerate(tasks):
                task.add_done_callback(partial(_told, told, index))
        results: list[Completion | None] = [None] * len(tasks)
        await self._watch(tasks, results, control, started)
        transient = [i for i, task in enumerate(tasks) if results[i] is None and _transient_failure(task)]
        if transient and len(transient) == len(tasks):
            raise TransientEngineError(f"the judge server at {self.host} failed every request: {tasks[0].exception()}")
        for i, task in enumerate(tasks):
            if results[i] is None:
                results[i] = _outcome(task)
        return [r for r in results if r is not None]

    def streams(self, request: GenerationRequest) -> bool:
        """Whether `request` goes as a stream when someone listens for its tokens: never here, as a hosted API's
        streams differ in what they carry; an engine whose server streams the very completion it returns unstreamed
        says which requests gain from it."""
        return False

    def lanes(self, conversations: Sequence[Conversation]) -> list[list[int]] | None:
        """Queues the call's conversations go through, each in its order (indices into `conversations`), at most
        `lane_depth` of a queue in flight at once; None: one pool, in the order sent. A server that keeps a cache per
        sequence slot (llama.cpp) plans them so prompts sharing a prefix follow each other in one slot."""
        return None

    lane_depth = 1

    def in_lane(self, body: dict[str, Any], lane: int) -> dict[str, Any]:
        """The request for a conversation queued in `lane` (llama.cpp: pinned to that slot)."""
        return body

    def _in_lanes(self, lanes: list[list[int]], bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each request as its lane sends it; a plan must queue every conversation exactly once."""
        if sorted(i for lane in lanes for i in lane) != list(range(len(bodies))):
            raise EngineError("a lane plan must queue every conversation of the call exactly once")
        lane_of = {index: number for number, lane in enumerate(lanes) for index in lane}
        return [self.in_lane(body, lane_of[index]) for index, body in enumerate(bodies)]

    async def _watch(
        self,
        tasks: list[asyncio.Task[Completion]],
        results: list[Completion | None],
        control: CallControl | None,
        started: float,
    ) -> None:
        """Wait for every request; abort those the control names (cancelled, or all at its deadline)."""
        pending = set(tasks)
        while pending:
            timeout = None
            if control is not None:
                timeout = control.poll_s if control.cancelled is not None else None
                if control.deadline is not None:
                    left = max(0.0, control.deadline - time.monotonic())
                    timeout = left if timeout is None else min(timeout, left)
            _done, pending = await asyncio.wait(pending, timeout=timeout)
            if control is None or not pending:
                continue
            if control.deadline is not None and time.monotonic() >= control.deadline:
                for i, task in enumerate(tasks):
                    if not task.done():
                        task.cancel()
                        results[i] = control.timed_out(started)
            elif control.cancelled is not None:
                for i in control.cancelled():
                    if 0 <= i < len(tasks) and not tasks[i].done():
                        tasks[i].cancel()
                        results[i] = aborted(CANCELLED)
            pending = {task for i, task in enumerate(tasks) if results[i] is None and not task.done()}
        # Let cancelled tasks finish unwinding (their connections close) before the call returns.
        await asyncio.gather(*tasks, return_exceptions=True)

    def body(self, conversation: Conversation, request: GenerationRequest) -> dict[str, Any]:
        """The chat-completions request for one conversation: the same messages the in-process engine renders."""
        body: dict[str, Any] = {
            "model": self._model,
            "messages": conversation,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if request.temperature == 0:
            # Sampled requests go unseeded: a seeded one kills a vLLM CPU server's engine once chunked prefill splits
            # it (see VLLMEngine), and juiz cannot tell which device serves it.
            body["seed"] = 0
        if request.word_groups:
            body["logprobs"] = True
            body["top_logprobs"] = OPENAI_MAX_TOP_LOGPROBS
        elif request.logprobs:
            body["logprobs"] = True
            body["top_logprobs"] = request.logprobs
        if self.dialect == "vllm":
            if request.regex is not None:
                body["structured_outputs"] = {"regex": request.regex}
            elif request.choice is not None:
                body["structured_outputs"] = {"choice": list(request.choice)}
        elif self.dialect == "llama.cpp":
            grammar = _gbnf_for(request)
            if grammar is not None:
                body["grammar"] = grammar
        return body

    async def _one(
        self,
        client: httpx.AsyncClient,
        semaphore: asyncio.Semaphore,
        body: dict[str, Any],
        word_groups: tuple[tuple[str, ...], ...] = (),
        tokens: Callable[[int, int], None] | None = None,
        stream: bool = False,
        enough: Callable[[str], bool] | None = None,
    ) -> Completion:
        """One request's completion; `tokens(written, read)` hears its tokens (as they stream, with `stream`, which
        also ends a reply once it is `enough`)."""
        async with semaphore:
            async for attempt in self._retrying():
                with attempt:
                    if stream:
                        answer = await self._streamed(client, body, tokens or _ignore_tokens, enough)
                    else:
                        response = await client.post("/chat/completions", json=body)
                        if response.status_code >= 400:
                            raise _server_error(response)
                        answer = response.json()
                        if tokens is not None:
                            tokens(*usage_tokens(answer))
                    return self.completion(answer, word_groups)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def _streamed(
        self,
        client: httpx.AsyncClient,
        body: dict[str, Any],
        tokens: Callable[[int, int], None],
        enough: Callable[[str], bool] | None = None,
    ) -> dict[str, Any]:
        """One request as a stream of chunks (server-sent events), its tokens reported chunk by chunk; returns the
        chat completion the same request returns unstreamed (`StreamedReply.completion_body`), or the reply so far
        once it is `enough` (closing the stream ends the request on the server)."""
        streamed = {**body, **self.STREAM_EXTRAS, "stream": True, "stream_options": {"include_usage": True}}
        reply = StreamedReply()
        async with client.stream("POST", "/chat/completions", json=streamed) as response:
            if response.status_code >= 400:
                await response.aread()
                raise _server_error(response)
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line.removeprefix("data:").strip()
                if data == "[DONE]":
                    break
                tokens(*reply.add(json.loads(data)))
                if enough is not None and reply.finish_reason is None and enough("".join(reply.text)):
                    reply.finish_reason = "stop"
                    break
        answer = reply.completion_body()
        tokens(*reply.settle(answer))
        return answer

    def completion(self, body: dict[str, Any], word_groups: tuple[tuple[str, ...], ...]) -> Completion:
        """One chat-completions response → Completion (an engine that reads P(yes) by token id overrides this)."""
        return completion_from_choice(body, word_groups)

    def _retrying(self) -> AsyncRetrying:
        return AsyncRetrying(
            retry=retry_if_exception(is_transient),
            wait=WaitRetryAfter(),
            stop=stop_after_attempt(self._attempts) | stop_after_delay(self._max_retry_s),
            reraise=True,
            before_sleep=lambda state: log.warning(
                "judge server: attempt %d failed (%s); retrying",
                state.attempt_number,
                state.outcome.exception() if state.outcome is not None else "?",
            ),
        )

    # --- start-up -------------------------------------------------------------------------------------------------

    async def _probe(self, dialect: Dialect) -> Dialect:
        """`GET /models`: the server is up, serves our model, and (for `auto`) which request extension it takes."""
        try:
            async for attempt in self._retrying():
                with attempt:
                    response = await self._http.get("/models")
                    if response.status_code >= 400:
                        raise ServerError(response.status_code, _reason(response))
        except (httpx.TransportError, ServerError) as exc:
            if is_transient(exc):
                raise TransientEngineError(f"the judge server at {self.base_url} is unreachable: {exc}") from exc
            raise EngineError(f"the judge server at {self.base_url} refused GET /models: {exc}") from exc
        served = {m.get("id"): m for m in (response.json().get("data") or []) if isinstance(m, dict)}
        if self._model not in served:
            names = ", ".join(sorted(str(n) for n in served)) or "none"
            raise ModelError(
                f"the judge server at {self.base_url} does not serve model {self._model!r} (it serves: {names})"
            )
        if dialect != "auto":
            return dialect
        owned_by = str(served[self._model].get("owned_by") or "")
        return _OWNED_BY.get(owned_by, "none")  # type: ignore[return-value]


def _queued(
    sends: Sequence[Callable[[], Awaitable[Completion]]], lanes: list[list[int]] | None, depth: int
) -> list[asyncio.Task[Completion]]:
    """One task per request, started at once (`lanes` None), or each waiting for the one `depth` places ahead of it
    in its lane."""
    if lanes is None:
        return [asyncio.create_task(_after(None, send)) for send in sends]
    tasks: list[asyncio.Task[Completion] | None] = [None] * len(sends)
    for lane in lanes:
        for place, index in enumerate(lane):
            ahead = tasks[lane[place - depth]] if place >= depth else None
            tasks[index] = asyncio.create_task(_after(ahead, sends[index]))
    return [task for task in tasks if task is not None]


async def _after(ahead: asyncio.Task[Completion] | None, send: Callable[[], Awaitable[Completion]]) -> Completion:
    """`send()` once `ahead` is over (done, failed or cancelled): a lane's requests reach the server in its order."""
    if ahead is not None:
        await asyncio.wait([ahead])
    return await send()


def _told(on_finished: Callable[[int], None], index: int, _task: asyncio.Task[Completion]) -> None:
    on_finished(index)


def _ignore_tokens(written: int, read: int) -> None:
    """No one listens."""


def _server_error(response: httpx.Response) -> ServerError:
    return ServerError(response.status_code, _reason(response), retry_after_s(response.headers.get("Retry-After")))


def usage_tokens(body: dict[str, Any]) -> tuple[int, int]:
    """(reply tokens written, prompt tokens computed) from a chat completion's `usage`: its completion tokens, and its
    prompt tokens less those the server's prefix cache served."""
    usage = body.get("usage") or {}
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return int(usage.get("completion_tokens") or 0), max(0, int(usage.get("prompt_tokens") or 0) - cached)


class StreamedReply:
    """A streamed chat completion's chunks, gathered into the body the same request returns unstreamed (the text, each
    position's log-probabilities, the finish reason, the usage); `add` says what each chunk added."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.positions: list[dict[str, Any]] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.written = 0  # reply tokens reported so far
        self.read = 0  # prompt tokens reported so far
        self.prompt: dict[str, int] = {}  # the prompt's size and what the cache served, where the server says

    def add(self, chunk: dict[str, Any]) -> tuple[int, int]:
        """One chunk in; (tokens written, prompt tokens read) new in it. A chunk's `error` fails the request."""
        error = chunk.get("error")
        if error is not None:
            code = error.get("code") if isinstance(error, dict) else None
            message = error.get("message") if isinstance(error, dict) else error
            raise ServerError(code if isinstance(code, int) else 500, str(message)[:500])
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        written = read = 0
        # llama.cpp's prompt processing (`return_progress`): prompt tokens processed so far, those from its cache apart.
        progress = chunk.get("prompt_progress")
        if isinstance(progress, dict):
            processed = max(0, int(progress.get("processed") or 0) - int(progress.get("cache") or 0))
            read = max(0, processed - self.read)
            self.prompt = {"total": int(progress.get("total") or 0), "cached": int(progress.get("cache") or 0)}
        for choice in chunk.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            positions = (choice.get("logprobs") or {}).get("content") or []
            if content:
                self.text.append(content)
            self.positions += positions
            # A chunk is one token where the server sends no log-probabilities for it.
            written += len(positions) or int(bool(content))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        self.written += written
        self.read += read
        return written, read

    def completion_body(self) -> dict[str, Any]:
        message = {"role": "assistant", "content": "".join(self.text)}
        logprobs = {"content": self.positions} if self.positions else None
        choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": self.finish_reason}
        return {"choices": [choice], "usage": self.usage or self._usage_so_far()}

    def _usage_so_far(self) -> dict[str, Any]:
        """A stream closed before its end (the reply was enough) has no usage chunk: what the chunks said instead."""
        usage: dict[str, Any] = {"completion_tokens": self.written}
        if self.prompt.get("total"):
            usage["prompt_tokens"] = self.prompt["total"]
            usage["prompt_tokens_details"] = {"cached_tokens": self.prompt["cached"]}
        return usage

    def settle(self, body: dict[str, Any]) -> tuple[int, int]:
        """What the usage counts beyond the chunks reported (a chunk of several tokens, a prompt read in one go)."""
        written, read = usage_tokens(body)
        more = max(0, written - self.written), max(0, read - self.read)
        self.written, self.read = self.written + more[0], self.read + more[1]
        return more


def _transient_failure(task: asyncio.Task[Completion]) -> bool:
    return not task.cancelled() and (exc := task.exception()) is not None and is_transient(exc)


def _outcome(task: asyncio.Task[Completion]) -> Completion:
    """A finished request's completion, or its failure as that item's error (other items are unaffected)."""
    if task.cancelled():
        return aborted(CANCELLED)
    exc = task.exception()
    if exc is None:
        return task.result()
    if isinstance(exc, ServerError):
        return Completion(text="", error=str(exc))
    if isinstance(exc, httpx.HTTPError):
        return Completion(text="", error=f"the judge server could not be reached: {type(exc).__name__}: {exc}")
    if isinstance(exc, (KeyError, IndexError, TypeError, ValueError)):
        return Completion(text="", error=f"the judge server's reply is not a chat completion: {exc!r}")
    raise exc


def build_openai_engine(settings: Settings) -> OpenAIEngine:
    """The openai back end as configured by `JUIZ_ENGINE_*` (the model name defaults to `JUIZ_MODEL`)."""
    return OpenAIEngine(
        settings.engine_base_url,
        settings.engine_model or settings.model,
        api_key=settings.engine_api_key,
        dialect=settings.engine_structured,
        max_concurrency=settings.engine_max_concurrency,
    )
