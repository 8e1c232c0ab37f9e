"""The OpenAI-compatible back end against a FAKE chat-completions server (httpx.MockTransport): request bodies,
reply parsing, logprobs, retries of transient faults, permanent faults failing one item, call control."""

from __future__ import annotations

import _thread
import asyncio
import dataclasses
import json
import math
import signal
import threading
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any

import httpx
import pytest

from juiz.engines.base import CallControl, GenerationRequest
from juiz.engines.llamacpp_engine import first_position_by_id
from juiz.engines.openai_server import (
    OpenAIEngine,
    StreamedReply,
    completion_from_choice,
)
from juiz.judging.checks import CHECK_REQUEST
from juiz.judging.judge import Judge
from juiz.judging.parsing import COT_REPLY_GBNF, COT_REPLY_REGEX
from juiz.judging.plan import COT_REQUEST, FAST_REQUEST
from juiz.runtime.errors import EngineError, ModelError, TransientEngineError
from juiz.runtime.retry import WaitRetryAfter, retry_after_s
from schemas import BatchOptions, JudgementStatus, Triple

REPLY = "Criteria: the question asks X.\nSupporting Evidence: the answer says X.\nScore: 2"
# The fake server writes CoT replies with the score digit's logprobs: the tests grading through it pin the CoT prompt
# (the default check prompts, is read from yes/no probabilities: tests/unit/test_checks.py, test_gate.py).
COT = BatchOptions(prompt="answer_relevance@juiz-1")


@pytest.fixture(autouse=True)
def closed_engines(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every engine a test makes is closed after it (an engine holds its event loop and connection pool)."""
    made: list[OpenAIEngine] = []
    init = OpenAIEngine.__init__

    def recording(self: OpenAIEngine, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(OpenAIEngine, "__init__", recording)
    yield
    for engine in made:
        engine.close()


def chat_response(text: str, *, logprobs: bool = True) -> dict[str, Any]:
    """A chat completion as vLLM's server writes it; the score digit gets a distribution when logprobs are on."""
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    if logprobs:
        head, digit = text[:-1], text[-1]
        choice["logprobs"] = {
            "content": [
                {"token": head, "logprob": 0.0, "top_logprobs": [{"token": head, "logprob": 0.0}]},
                {
                    "token": digit,
                    "logprob": math.log(0.5),
                    "top_logprobs": [
                        {"token": "2", "logprob": math.log(0.5)},
                        {"token": "3", "logprob": math.log(0.5)},
                        {"token": "0", "logprob": -9999.0},
                    ],
                },
            ]
        }
    return {
        "id": "x",
        "object": "chat.completion",
        "choices": [choice],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 64}},
    }


class FakeServer:
    """A FAKE OpenAI-compatible server: `reply(body, attempt)` answers each POST; GET /models lists `judge`."""

    def __init__(
        self, reply: Callable[[dict[str, Any], int], httpx.Response] | None = None, owned_by: str = "vllm"
    ) -> None:
        self.reply = reply or (lambda body, attempt: httpx.Response(200, json=chat_response(REPLY)))
        self.owned_by = owned_by
        self.bodies: list[dict[str, Any]] = []
        self.attempts: dict[str, int] = {}
        self.headers: list[httpx.Headers] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(request.headers)
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "judge", "owned_by": self.owned_by}]})
        body = json.loads(request.content)
        key = body["messages"][-1]["content"]
        with self.lock:
            self.bodies.append(body)
            self.attempts[key] = self.attempts.get(key, 0) + 1
            attempt = self.attempts[key]
        return self.reply(body, attempt)

    def engine(self, **kwargs: Any) -> OpenAIEngine:
        return OpenAIEngine("http://judge.example:8000/v1", "judge", transport=httpx.MockTransport(self), **kwargs)


def conv(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "grade"}, {"role": "user", "content": text}]


def test_request_body_asks_vllm_for_the_reply_format_and_logprobs() -> None:
    server = FakeServer()
    engine = server.engine(api_key="sekret")
    assert engine.dialect == "vllm"  # from owned_by
    engine.generate([conv("a")], COT_REQUEST)
    engine.generate([conv("b")], FAST_REQUEST)
    cot, fast = server.bodies
    assert cot["messages"] == conv("a")
    assert cot["structured_outputs"] == {"regex": COT_REPLY_REGEX}
    assert fast["structured_outputs"] == {"choice": ["0", "1", "2", "3"]}
    assert cot["logprobs"] is True and cot["top_logprobs"] == 20
    assert cot["temperature"] == 0.0 and cot["max_tokens"] == COT_REQUEST.max_tokens and cot["model"] == "judge"
    assert all(h["authorization"] == "Bearer sekret" for h in server.headers)


def test_greedy_requests_are_seeded_and_sampled_ones_are_not() -> None:
    server = FakeServer()
    engine = server.engine()
    engine.generate([conv("a")], COT_REQUEST)
    engine.generate([conv("b")], dataclasses.replace(COT_REQUEST, temperature=0.7, n=3))
    greedy, sampled = server.bodies
    assert greedy["seed"] == 0
    assert "seed" not in sampled  # a seeded sampled request kills a vLLM CPU server's engine
    assert sampled["temperature"] == 0.7


def test_llama_cpp_gets_a_gbnf_grammar_and_other_servers_nothing() -> None:
    llama = FakeServer(owned_by="llamacpp")
    engine = llama.engine()
    assert engine.dialect == "llama.cpp"
    engine.generate([conv("a")], COT_REQUEST)
    engine.generate([conv("b")], FAST_REQUEST)
    assert llama.bodies[0]["grammar"] == COT_REPLY_GBNF
    assert "[^\\n]{1,200}" in COT_REPLY_GBNF and COT_REPLY_GBNF.endswith('"Score: " [0-3]')
    assert llama.bodies[1]["grammar"] == 'root ::= "0" | "1" | "2" | "3"'
    assert "structured_outputs" not in llama.bodies[0]
    other = FakeServer(owned_by="openai")
    plain = other.engine()
    assert plain.dialect == "none"
    plain.generate([conv("a")], COT_REQUEST)
    assert "grammar" not in other.bodies[0] and "structured_outputs" not in other.bodies[0]


def test_completion_reads_text_logprobs_cached_and_reply_tokens() -> None:
    completion = completion_from_choice(chat_response(REPLY))
    assert completion.text == REPLY and completion.finish_reason == "stop"
    assert completion.tokens[-1] == "2"
    assert completion.top_logprobs[-1] == {"2": math.log(0.5), "3": math.log(0.5)}  # -9999 (impossible) dropped
    assert (completion.prompt_tokens, completion.cached_prompt_tokens) == (100, 64)
    assert completion.reply_tokens == 10  # the server's count, not the log-probabilities' length


def test_judge_on_the_server_back_end_scores_and_records_where() -> None:
    server = FakeServer()
    judge = Judge(server.engine())
    [judgement] = judge.grade([Triple(id="1", question="q?", answer="a")], COT)
    assert judgement.status == JudgementStatus.OK and judgement.score == 2
    assert judgement.expected_score == pytest.approx((2 + 3) / 2 / 3)
    assert judge.engine.origin == {"engine": "openai", "engine_host": "judge.example"}
    assert (judgement.provenance.engine, judgement.provenance.engine_host) == ("openai", "judge.example")
    assert judgement.metrics is not None
    assert all(m.provenance and m.provenance.engine_host == "judge.example" for m in judgement.metrics.values())


def test_missing_logprobs_give_a_null_expected_score_not_a_made_up_one() -> None:
    server = FakeServer(lambda body, attempt: httpx.Response(200, json=chat_response(REPLY, logprobs=False)))
    [judgement] = Judge(server.engine()).grade([Triple(id="1", question="q?", answer="a")], COT)
    assert judgement.status == JudgementStatus.OK and judgement.score == 2
    assert judgement.expected_score is None


def test_429_with_retry_after_is_retried_and_honoured() -> None:
    def reply(body: dict[str, Any], attempt: int) -> httpx.Response:
        if attempt == 1:
            return httpx.Response(429, headers={"Retry-After": "0"}, json={"error": {"message": "slow down"}})
        return httpx.Response(200, json=chat_response(REPLY))

    server = FakeServer(reply)
    [completion] = server.engine().generate([conv("a")], COT_REQUEST)
    assert completion.error is None and completion.text == REPLY
    assert server.attempts[conv("a")[-1]["content"]] == 2


def test_the_wait_is_the_servers_retry_after() -> None:
    from tenacity import RetryCallState

    from juiz.engines.openai_server import ServerError

    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.set_exception((ServerError, ServerError(429, "busy", retry_after_s=7.0), None))
    assert WaitRetryAfter()(state) == 7.0
    assert retry_after_s("3") == 3.0 and retry_after_s("soon") is None and retry_after_s(None) is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: now


def test_500_is_retried() -> None:
    def reply(body: dict[str, Any], attempt: int) -> httpx.Response:
        if attempt < 3:
            return httpx.Response(500, text="upstream hiccup", headers={"Retry-After": "0"})
        return httpx.Response(200, json=chat_response(REPLY))

    server = FakeServer(reply)
    [completion] = server.engine().generate([conv("a")], COT_REQUEST)
    assert completion.text == REPLY and server.attempts[conv("a")[-1]["content"]] == 3


def test_400_fails_that_item_alone_with_the_servers_reason() -> None:
    def reply(body: dict[str, Any], attempt: int) -> httpx.Response:
        if "too long" in body["messages"][-1]["content"]:  # the judge's prompt holds the question
            return httpx.Response(400, json={"error": {"message": "maximum context length is 4096 tokens"}})
        return httpx.Response(200, json=chat_response(REPLY))

    server = FakeServer(reply)
    good, bad, good2 = server.engine().generate([conv("x"), conv("too long"), conv("y")], COT_REQUEST)
    assert good.text == REPLY and good2.text == REPLY
    assert bad.error == "HTTP 400 from the judge server: maximum context length is 4096 tokens"
    assert server.attempts["too long"] == 1  # permanent: never retried
    assert len(server.bodies) == 3
    judgements = Judge(server.engine()).grade(
        [Triple(id="1", question="x", answer="a"), Triple(id="2", question="too long", answer="a")], COT
    )
    assert [j.status for j in judgements] == [JudgementStatus.OK, JudgementStatus.FAILED]
    assert "maximum context length" in (judgements[1].error or "")


def test_a_server_down_for_every_request_is_a_transient_engine_error() -> None:
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "judge", "owned_by": "vllm"}]})
        calls["n"] += 1
        raise httpx.ConnectError("connection refused", request=request)

    engine = OpenAIEngine(
        "http://127.0.0.1:9/v1", "judge", transport=httpx.MockTransport(handler), attempts=2, max_retry_s=5
    )
    with pytest.raises(TransientEngineError, match="failed every request"):
        engine.generate([conv("a"), conv("b")], COT_REQUEST)
    assert calls["n"] == 4  # two attempts each


def test_unknown_model_is_a_model_error_naming_what_is_served() -> None:
    with pytest.raises(ModelError, match="serves: judge"):
        OpenAIEngine("http://h/v1", "other", transport=httpx.MockTransport(FakeServer()))


def test_cancelled_indices_and_the_deadline_abort_in_flight_requests() -> None:
    release = threading.Event()  # never set: the request named "hang" stays in flight until aborted

    async def reply_async(request: httpx.Request) -> httpx.Response:
        import anyio

        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "judge", "owned_by": "vllm"}]})
        if json.loads(request.content)["messages"][-1]["content"] == "hang":
            while not release.is_set():
                await anyio.sleep(0.01)
        return httpx.Response(200, json=chat_response(REPLY))

    engine = OpenAIEngine("http://h/v1", "judge", transport=httpx.MockTransport(reply_async))
    fast, hung = engine.generate(
        [conv("ok"), conv("hang")], COT_REQUEST, CallControl(cancelled=lambda: {1}, poll_s=0.01)
    )
    assert fast.text == REPLY
    assert (hung.error, hung.finish_reason) == ("cancelled", "abort")
    import time

    [timed_out] = engine.generate([conv("hang")], COT_REQUEST, CallControl(deadline=time.monotonic() + 0.05))
    assert timed_out.finish_reason == "abort" and (timed_out.error or "").startswith("timed out after")


def test_an_unknown_regex_on_llama_cpp_is_left_to_the_parser() -> None:
    server = FakeServer(owned_by="llamacpp")
    server.engine().generate([conv("a")], GenerationRequest(max_tokens=5, regex="[a-z]+"))
    assert "grammar" not in server.bodies[0]


class ClosingCounter(httpx.MockTransport):
    """The FAKE server's transport, counting how often its client lets it go."""

    def __init__(self, server: FakeServer) -> None:
        super().__init__(server)
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


def test_one_connection_pool_serves_every_call_and_goes_at_close() -> None:
    transport = ClosingCounter(FakeServer())
    engine = OpenAIEngine("http://judge.example:8000/v1", "judge", transport=transport)
    for text in ("a", "b", "c"):
        [completion] = engine.generate([conv(text)], COT_REQUEST)
        assert completion.error is None
    assert transport.closed == 0  # kept between calls (it was opened and closed by each call before)
    engine.close()
    engine.close()  # twice is harmless
    assert transport.closed == 1
    with pytest.raises(EngineError, match="closed"):
        engine.generate([conv("d")], COT_REQUEST)


class Hanging(httpx.AsyncBaseTransport):
    """Answers /models; the first chat request interrupts the main thread (as Ctrl-C or RQ's job-timeout signal
    would) and never returns; later ones answer at once."""

    def __init__(self) -> None:
        self.cancelled = 0
        self.posts = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "judge", "owned_by": "vllm"}]})
        self.posts += 1
        if self.posts > 1:
            return httpx.Response(200, json=chat_response(REPLY))
        _thread.interrupt_main()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")


def test_a_call_interrupted_from_outside_leaves_no_request_running_for_the_next_call() -> None:
    transport = Hanging()
    engine = OpenAIEngine("http://judge.example:8000/v1", "judge", transport=transport)
    # Python's own SIGINT handler (KeyboardInterrupt), whatever an earlier test in this process left installed (an RQ
    # worker's raises StopRequested instead).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.generate([conv("hangs")], COT_REQUEST)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert transport.cancelled == 1
    [completion] = engine.generate([conv("next")], COT_REQUEST)
    assert completion.error is None and completion.text == REPLY
    engine.close()


def test_each_request_is_reported_finished_as_it_returns() -> None:
    """The slow request is held until the fast one has been reported: on_finished hears each as it returns, within
    the call, and the aborted one too."""
    heard: list[int] = []
    fast_heard = threading.Event()

    async def reply_async(request: httpx.Request) -> httpx.Response:
        import anyio

        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "judge", "owned_by": "vllm"}]})
        content = json.loads(request.content)["messages"][-1]["content"]
        if content == "slow":
            while not fast_heard.is_set():
                await anyio.sleep(0.01)
        if content == "hang":
            while True:
                await anyio.sleep(0.01)
        return httpx.Response(200, json=chat_response(REPLY))

    def on_finished(index: int) -> None:
        heard.append(index)
        if index == 1:
            fast_heard.set()

    engine = OpenAIEngine("http://h/v1", "judge", transport=httpx.MockTransport(reply_async))
    control = CallControl(cancelled=lambda: {2} if fast_heard.is_set() else set(), poll_s=0.01)
    control.on_finished = on_finished
    slow, fast, hung = engine.generate([conv("slow"), conv("fast"), conv("hang")], COT_REQUEST, control)
    assert heard[0] == 1 and sorted(heard) == [0, 1, 2]
    assert slow.text == fast.text == REPLY and hung.finish_reason == "abort"


class StreamingEngine(OpenAIEngine):
    """An engine whose server streams every single reply (as llama.cpp's own does), with its prompt progress."""

    STREAM_EXTRAS = MappingProxyType({"return_progress": True})

    def streams(self, request: GenerationRequest) -> bool:
        return request.n == 1


def stream_of(whole: dict[str, Any]) -> bytes:
    """`whole` (a chat completion) as a server streams it, ending with [DONE]."""
    events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks_of(whole)] + ["data: [DONE]\n\n"]
    return "".join(events).encode()


def chunks_of(whole: dict[str, Any]) -> list[dict[str, Any]]:
    """`whole`'s chunks: the prompt's progress (with a cache of 64 tokens), a role chunk, one chunk per token with its
    log-probabilities, the finish reason, the usage."""
    choice = whole["choices"][0]
    chunks: list[dict[str, Any]] = [
        {"choices": [], "prompt_progress": {"total": 100, "cache": 64, "processed": 80, "time_ms": 5}},
        {"choices": [], "prompt_progress": {"total": 100, "cache": 64, "processed": 100, "time_ms": 9}},
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]},
    ]
    for position in choice["logprobs"]["content"]:
        delta = {"content": position["token"]}
        chunks.append({"choices": [{"index": 0, "delta": delta, "logprobs": {"content": [position]}}]})
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    chunks.append({"choices": [], "usage": {**whole["usage"], "completion_tokens": len(chunks) - 4}})
    return chunks


def test_a_long_reply_streams_its_tokens_and_completes_as_the_unstreamed_request_does() -> None:
    """A listened-to long reply is streamed: its prompt progress and each token are heard before it is finished, and
    the completion assembled from the chunks is the one the same request returns unstreamed."""
    whole = chat_response(REPLY)

    def reply(body: dict[str, Any], attempt: int) -> httpx.Response:
        if body.get("stream"):
            return httpx.Response(200, content=stream_of(whole), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json={**whole, "usage": {**whole["usage"], "completion_tokens": 2}})

    server = FakeServer(reply)
    engine = StreamingEngine("http://h/v1", "judge", transport=httpx.MockTransport(server))
    heard: list[tuple[str, int, int]] = []
    control = CallControl(
        on_tokens=lambda i, written, read: heard.append(("tokens", written, read)),
        on_finished=lambda i: heard.append(("finished", 0, 0)),
    )
    (streamed,) = engine.generate([conv("a")], COT_REQUEST, control)
    (unstreamed,) = engine.generate([conv("a")], COT_REQUEST)  # nobody listens: not streamed
    assert streamed == unstreamed and streamed.text == REPLY and streamed.cached_prompt_tokens == 64
    first, second = server.bodies
    assert first["stream"] is True and first["return_progress"] is True and first["stream_options"]["include_usage"]
    assert "stream" not in second
    # The prompt read (16 then 20 of its 36 uncached tokens), then each token as it came, then the end.
    assert heard == [("tokens", 0, 16), ("tokens", 0, 20), ("tokens", 1, 0), ("tokens", 1, 0), ("finished", 0, 0)]


def test_a_reply_that_is_enough_closes_its_stream_there_and_counts_what_the_stream_said() -> None:
    """GenerationRequest.enough on a streaming server: the stream is read until the reply so far is enough and then
    closed (the server ends the request), even when nobody listens; the completion is that reply, its usage the
    prompt's progress and the tokens streamed (no usage chunk came)."""
    whole = chat_response(REPLY)
    server = FakeServer(
        lambda body, attempt: httpx.Response(
            200, content=stream_of(whole), headers={"content-type": "text/event-stream"}
        )
    )
    engine = StreamingEngine("http://h/v1", "judge", transport=httpx.MockTransport(server))
    request = dataclasses.replace(COT_REQUEST, enough=lambda text: "Score:" in text)  # the digit is the next chunk
    (stopped,) = engine.generate([conv("a")], request)
    assert server.bodies[0]["stream"] is True
    assert stopped.text == REPLY[:-1]
    assert stopped.finish_reason == "stop" and stopped.error is None
    assert (stopped.prompt_tokens, stopped.cached_prompt_tokens) == (100, 64)
    assert stopped.reply_tokens == len(stopped.tokens) < len(whole["choices"][0]["logprobs"]["content"])


def test_a_server_not_known_to_stream_gets_no_stream_and_replies_report_their_usage_as_they_return() -> None:
    server = FakeServer()
    engine = server.engine()
    heard: list[tuple[int, int, int]] = []
    control = CallControl(on_tokens=lambda i, written, read: heard.append((i, written, read)))
    engine.generate([conv("a"), conv("b")], dataclasses.replace(FAST_REQUEST, max_tokens=1), control)
    engine.generate([conv("c")], COT_REQUEST, control)
    assert all("stream" not in body for body in server.bodies)
    # usage: 10 written; 100 prompt tokens, 64 of them cached
    assert sorted(heard) == [(0, 10, 36), (0, 10, 36), (1, 10, 36)]


def check_response(candidates: list[tuple[int, str, float]]) -> dict[str, Any]:
    """A one-token check's chat completion as llama.cpp's server writes it: each candidate with its token id."""
    top = [{"id": i, "token": text, "logprob": lp, "bytes": list(text.encode())} for i, text, lp in candidates]
    position = {**top[0], "top_logprobs": top}
    choice = {"index": 0, "message": {"role": "assistant", "content": top[0]["token"]}, "finish_reason": "length"}
    return {
        "choices": [{**choice, "logprobs": {"content": [position]}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 64}},
    }


def test_a_one_token_check_streams_its_prompt_progress_and_reads_the_same_p_yes_by_token_id() -> None:
    """A check's time is all prompt: listened to, it is streamed for the prompt's progress, and the completion put
    together from the chunks carries each candidate's token id and log-probability as the unstreamed body does."""
    whole = check_response([(9454, "Yes", math.log(0.7)), (2753, "No", math.log(0.2)), (9891, " yes", -4.0)])
    reply = StreamedReply()
    for chunk in chunks_of(whole):
        reply.add(chunk)
    assembled = reply.completion_body()
    assert (
        first_position_by_id(assembled)
        == first_position_by_id(whole)
        == {9454: math.log(0.7), 2753: math.log(0.2), 9891: -4.0}
    )
    assert assembled["choices"][0]["logprobs"] == whole["choices"][0]["logprobs"]

    def server_reply(body: dict[str, Any], attempt: int) -> httpx.Response:
        if body.get("stream"):
            return httpx.Response(200, content=stream_of(whole), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=whole)

    server = FakeServer(server_reply)
    engine = StreamingEngine("http://h/v1", "judge", transport=httpx.MockTransport(server))
    heard: list[tuple[int, int]] = []
    control = CallControl(on_tokens=lambda i, written, read: heard.append((written, read)))
    (streamed,) = engine.generate([conv("a")], CHECK_REQUEST, control)
    (unstreamed,) = engine.generate([conv("a")], CHECK_REQUEST)
    assert server.bodies[0]["stream"] is True and "stream" not in server.bodies[1]
    assert streamed == unstreamed and streamed.word_probs == pytest.approx((0.7 + math.exp(-4.0), 0.2))
    assert heard == [(0, 16), (0, 20), (1, 0)]  # the prompt as it is read, then its one token
