"""Real llama.cpp generation on SmolLM2-135M's GGUF: the reply grammar, P(yes) by token id, prompt caching, a check
streamed for its prompt's progress, and what results record about the engine."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from bench.fake_worker import fake_reply
from juiz.engines.base import CallControl, GenerationRequest
from juiz.engines.fake import FakeEngine
from juiz.engines.llamacpp_engine import BATCH_TOKENS
from juiz.engines.models import TEST_MODEL
from juiz.engines.openai_server import StreamedReply
from juiz.judging.checks import CHECK_REQUEST
from juiz.judging.judge import Judge
from schemas import BatchOptions, Triple

pytestmark = pytest.mark.engine


def test_the_reply_grammar_holds_even_for_a_model_that_would_not_follow_it(tiny_llamacpp_engine: Any) -> None:
    grammar = 'root ::= "Score: " [0-3]'
    conversation = [{"role": "user", "content": "Tell me a long story about dragons."}]
    [completion] = tiny_llamacpp_engine.generate([conversation], GenerationRequest(max_tokens=8, grammar=grammar))
    assert completion.error is None
    assert completion.text in {f"Score: {d}" for d in "0123"}
    assert completion.top_logprobs, "log-probabilities of every generated token"


def test_p_yes_is_read_by_token_id_and_agrees_with_the_greedy_reply(tiny_llamacpp_engine: Any) -> None:
    conversation = [{"role": "user", "content": "Is Paris the capital of France? Reply with one word: Yes or No."}]
    [completion] = tiny_llamacpp_engine.generate([conversation], CHECK_REQUEST)
    assert completion.word_probs is not None
    yes, no = completion.word_probs
    assert 0.0 < yes + no <= 1.0 + 1e-6
    groups = tiny_llamacpp_engine.token_groups(CHECK_REQUEST.word_groups)
    assert all(groups) and not set(groups[0]) & set(groups[1])
    first = completion.text.strip().casefold()
    if first in ("yes", "no"):
        assert (yes >= no) == (first == "yes")


def test_a_shared_prefix_is_computed_once_and_reported_as_cached(tiny_llamacpp_engine: Any) -> None:
    shared = "You grade answers. " + "Be strict and brief. " * 40
    conversations = [
        [{"role": "system", "content": shared}, {"role": "user", "content": f"Is {n} even? Yes or No."}]
        for n in range(6)
    ]
    completions = tiny_llamacpp_engine.generate(conversations, CHECK_REQUEST)
    assert all(c.error is None and c.prompt_tokens > 200 for c in completions)
    # The engine pins conversations to slots (juiz.engines.slots): a prefix that is only a shared system message may
    # be spread over the slots, each computing it once; every later conversation in a slot reuses it.
    slots = tiny_llamacpp_engine.config.slots
    assert sum(c.cached_prompt_tokens > 200 for c in completions) >= len(conversations) - slots


def test_an_items_checks_are_served_the_context_its_reference_left_in_a_slot(tiny_llamacpp_engine: Any) -> None:
    """The judge's two calls for three long items over two slots, as it sends them: the references, then every check
    (the item's own, and the per-sentence ones under another system message). A slot holds the item its reference
    read (or gets it back from the prompt cache in RAM), so at most one item's context is computed again by its checks.
    With two requests in flight per slot, the server ran an item's last check after a later request of its slot had
    replaced the item: the context computed again for two of the three items."""
    calls: list[tuple[list[Any], Any]] = []

    class Recording(FakeEngine):
        def generate(self, conversations: Any, request: Any, control: Any = None) -> Any:
            calls.append((list(conversations), request))
            return super().generate(conversations, request, control)

    def context(n: int) -> str:
        return " ".join(
            f"[{k + 1}] Station {n} logs reading {k} at depth {k * n} metres, then rests." for k in range(40)
        )

    triples = [
        Triple(
            id=f"t{n}",
            question=f"What does station {n} log?",
            context=context(n),
            answer=f"Station {n} logs readings at growing depths. It rests after each one. Nothing else is said.",
        )
        for n in range(1, 4)
    ]
    Judge(Recording(fake_reply)).grade(triples, BatchOptions(metrics=["answer_relevance"]))
    (references, _), (checks, _) = calls[0], calls[-1]
    assert len(references) == 3 and len(checks) > 12
    tiny_llamacpp_engine.generate(references, GenerationRequest(max_tokens=1, logprobs=0))
    completions = tiny_llamacpp_engine.generate(checks, CHECK_REQUEST)
    assert all(c.error is None for c in completions)
    with_context = [
        c
        for conversation, c in zip(checks, completions, strict=True)
        if "station" in conversation[-1]["content"] and "at depth" in conversation[-1]["content"]
    ]
    recomputed = [c for c in with_context if c.prompt_tokens - c.cached_prompt_tokens > c.prompt_tokens / 2]
    assert len(recomputed) <= 1, [(c.prompt_tokens, c.cached_prompt_tokens) for c in with_context]


def test_results_record_llama_cpp_and_the_quantisation(tiny_llamacpp_engine: Any) -> None:
    triple = Triple(id="a", question="What is the capital of France?", answer="Paris.")
    [result] = Judge(tiny_llamacpp_engine).grade([triple], BatchOptions(prompt="answer_relevance@juiz-1"))
    provenance = result.provenance
    assert provenance is not None
    assert provenance.model == TEST_MODEL
    assert provenance.engine == "llamacpp" and provenance.engine_quantisation == "Q4_1"
    assert provenance.engine_host is None and provenance.engine_dtype is None


def long_check(topic: str) -> list[dict[str, str]]:
    """A check of ~750 prompt tokens: two of the server's steps of BATCH_TOKENS."""
    system = f"You grade answers about {topic}. " + "Be strict and brief, and say why. " * 80
    return [{"role": "system", "content": system}, {"role": "user", "content": "Is 7 even? Reply Yes or No."}]


def streamed_body(client: httpx.Client, body: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """The chat completion put together from the request's stream, and the prompt progress it reported."""
    reply, processed = StreamedReply(), []
    streamed = {**body, "stream": True, "return_progress": True, "stream_options": {"include_usage": True}}
    with client.stream("POST", "/chat/completions", json=streamed) as response:
        for line in response.iter_lines():
            data = line.removeprefix("data:").strip()
            if not line.startswith("data:") or data == "[DONE]":
                continue
            chunk = json.loads(data)
            if "prompt_progress" in chunk:
                processed.append(chunk["prompt_progress"]["processed"])
            reply.add(chunk)
    return reply.completion_body(), processed


def test_a_streamed_check_puts_together_the_unstreamed_body_field_by_field(tiny_llamacpp_engine: Any) -> None:
    """The server's stream of a one-token check, as StreamedReply assembles it, against the same request unstreamed:
    the reply, the finish reason, the usage, and every top candidate's token id, bytes and log-probability. Both
    compute the whole prompt (`cache_prompt` off): one served from the cache reads log-probabilities a few hundredths
    apart on this model, streamed or not."""
    engine = tiny_llamacpp_engine
    engine.token_groups(CHECK_REQUEST.word_groups)
    body = engine.in_lane(engine.body(long_check("rivers"), CHECK_REQUEST), 0) | {"cache_prompt": False}
    # A client each: the server may close a connection kept alive after a stream.
    with httpx.Client(base_url=engine.address + "/v1", timeout=300.0) as client:
        streamed, processed = streamed_body(client, body)
    with httpx.Client(base_url=engine.address + "/v1", timeout=300.0) as client:
        unstreamed = client.post("/chat/completions", json=body).json()
    (got,), (want,) = streamed["choices"], unstreamed["choices"]
    assert (got["message"], got["finish_reason"]) == (want["message"], want["finish_reason"])
    assert got["logprobs"] == want["logprobs"]
    assert len(want["logprobs"]["content"][0]["top_logprobs"]) == 100
    assert all("id" in candidate for candidate in got["logprobs"]["content"][0]["top_logprobs"])
    assert streamed["usage"] == unstreamed["usage"]
    # The prompt's progress came once a step of BATCH_TOKENS, up to the whole prompt.
    prompt = unstreamed["usage"]["prompt_tokens"]
    assert processed[-1] == prompt and [n for n in processed if 0 < n < prompt] == list(
        range(BATCH_TOKENS, prompt, BATCH_TOKENS)
    )
    assert engine.completion(streamed, CHECK_REQUEST.word_groups) == engine.completion(
        unstreamed, CHECK_REQUEST.word_groups
    )


def test_a_check_listened_to_reports_its_prompt_as_it_is_read_and_reads_the_same_p_yes(
    tiny_llamacpp_engine: Any,
) -> None:
    """Through `generate`: a check someone listens to hears its prompt read step by step; on the same cached prompt the
    streamed check's completion (P(yes) included) equals the unstreamed one's."""
    reads: list[int] = []
    control = CallControl(on_tokens=lambda index, written, read: reads.append(read))
    conversation = long_check("lakes")
    (first,) = tiny_llamacpp_engine.generate([conversation], CHECK_REQUEST, control)
    assert first.error is None and first.word_probs is not None
    assert len([n for n in reads if n]) >= 2  # the prompt in two steps at least, before its one token
    assert sum(reads) == first.prompt_tokens - first.cached_prompt_tokens > BATCH_TOKENS
    (unstreamed,) = tiny_llamacpp_engine.generate([conversation], CHECK_REQUEST)
    (streamed,) = tiny_llamacpp_engine.generate([conversation], CHECK_REQUEST, control)
    assert unstreamed.cached_prompt_tokens == streamed.cached_prompt_tokens > BATCH_TOKENS
    assert streamed == unstreamed


def test_the_servers_slots_report_the_counters_the_hang_watch_reads(tiny_llamacpp_engine: Any) -> None:
    slots = tiny_llamacpp_engine._slots()
    assert len(slots) == tiny_llamacpp_engine.config.slots
    for slot in slots:
        assert {"id", "id_task", "is_processing", "n_prompt_tokens_processed", "next_token"} <= set(slot)
