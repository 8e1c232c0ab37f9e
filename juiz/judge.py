"""The judge: triples in, judgements out, every item of a run in one batched engine call.

render (prompts) → generate (engine, one call per sampling setting) → parse (parsing) → judgement (schemas).
The CLI, the service's workers and the benchmarks all grade through `Judge.grade_many`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import prompts
from juiz import __version__
from juiz.engine import Completion, Conversation, GenerationRequest, JudgeEngine
from juiz.errors import EngineError, PromptError, TransientEngineError
from juiz.labels import automated_label
from juiz.language import detect_language
from juiz.parsing import COT_MAX_TOKENS, COT_REPLY_REGEX, SCORE_DIGITS, expected_score, parse_reply
from schemas import BatchOptions, Judgement, JudgementStatus, Provenance, Triple

log = logging.getLogger(__name__)

COT_REQUEST = GenerationRequest(max_tokens=COT_MAX_TOKENS, regex=COT_REPLY_REGEX, logprobs=20)
# Fast mode: one forward pass; the reply is one digit and the expected score comes from its distribution.
FAST_REQUEST = GenerationRequest(max_tokens=1, choice=SCORE_DIGITS, logprobs=20)


def select_prompt(options: BatchOptions, question: str) -> prompts.PromptTemplate:
    """The prompt for one item: the requested id (or the metric's default version), in the item's language."""
    version = prompts.DEFAULT_VERSIONS[options.metric]
    lang: str | None = None
    if options.prompt:
        try:
            metric, version, lang = prompts.parse_prompt_id(options.prompt)
        except prompts.PromptNotFound as exc:
            raise PromptError(str(exc)) from exc
        if metric != options.metric:
            raise PromptError(f"prompt {options.prompt!r} is not a {options.metric} prompt")
    if lang is None:
        lang = detect_language(question) if options.lang == "auto" else options.lang
    try:
        return prompts.load(options.metric, version, lang)
    except prompts.PromptNotFound as exc:
        raise PromptError(str(exc)) from exc


def validate_options(options: BatchOptions) -> None:
    """Fail before any work when a prompt id can't be served in every language it may be asked for."""
    for lang in (options.lang,) if options.lang != "auto" else prompts.LANGUAGES:
        select_prompt(options.model_copy(update={"lang": lang}), question="")


@dataclass
class Judge:
    engine: JudgeEngine

    def warm_up(self) -> float:
        """Compile the reply grammar before real work: xgrammar builds its token masks once per engine (seconds on a
        CPU, more under load), and vLLM drops requests whose grammar takes longer than its compile timeout."""
        started = time.perf_counter()
        conversation = [{"role": "user", "content": "Warm-up."}]
        for request in (COT_REQUEST, FAST_REQUEST):
            self.engine.generate([conversation], replace(request, max_tokens=1))
        return time.perf_counter() - started

    def grade(self, triples: Sequence[Triple], options: BatchOptions | None = None) -> list[Judgement]:
        options = options or BatchOptions()
        return self.grade_many([(t, options) for t in triples])

    def grade_many(self, items: Sequence[tuple[Triple, BatchOptions]]) -> list[Judgement]:
        """Grade items that may carry different options (e.g. chunks of several batches) in as few calls as possible.

        Prompts differ per item, so they still share one call; only a different sampling setting (cot vs fast)
        needs a call of its own.
        """
        templates = [select_prompt(options, triple.question) for triple, options in items]
        results: list[Judgement | None] = [None] * len(items)
        for mode in ("cot", "fast"):
            request = request_for(mode)
            indices = [i for i, (_, options) in enumerate(items) if options.mode == mode]
            if not indices:
                continue
            conversations = [
                templates[i].render(question=items[i][0].question, answer=items[i][0].answer, mode=mode)
                for i in indices
            ]
            started = time.perf_counter()
            completions = self._generate_isolating_failures(conversations, request)
            latency = time.perf_counter() - started
            for i, completion in zip(indices, completions, strict=True):
                triple, options = items[i]
                results[i] = _judgement(
                    triple, options, completion, templates[i], request, mode, self.engine.model_id, latency
                )
        return [r for r in results if r is not None]

    def _generate_isolating_failures(
        self, conversations: list[Conversation], request: GenerationRequest
    ) -> list[Completion]:
        """One batched call; if the engine rejects the batch, split it to find and fail only the bad items."""
        try:
            return self.engine.generate(conversations, request)
        except TransientEngineError:
            raise  # the caller (a worker) retries the whole chunk later
        except (EngineError, ValueError, RuntimeError) as exc:
            if len(conversations) == 1:
                log.warning("engine rejected one item: %s", exc)
                return [Completion(text="", error=f"{type(exc).__name__}: {exc}")]
            half = len(conversations) // 2
            log.warning(
                "engine rejected a batch of %d (%s); splitting to isolate the bad item", len(conversations), exc
            )
            return self._generate_isolating_failures(conversations[:half], request) + (
                self._generate_isolating_failures(conversations[half:], request)
            )


def _judgement(
    triple: Triple,
    options: BatchOptions,
    completion: Completion,
    template: prompts.PromptTemplate,
    request: GenerationRequest,
    mode: str,
    model: str,
    latency: float,
) -> Judgement:
    common: dict[str, Any] = {
        **item_fields(triple),
        "latency_s": round(latency, 4),
        "provenance": _provenance(model, template.id, template.sha256, request, mode),
    }
    if completion.error is not None:
        return Judgement(status=JudgementStatus.FAILED, error=completion.error, raw_output=None, **common)
    parsed = parse_reply(completion.text)
    if not parsed.ok:
        error = parsed.error
        if completion.finish_reason == "length":
            error = f"{error} (reply cut at max_tokens={request.max_tokens})"
        elif not completion.text:
            error = f"{error} (empty reply, finish_reason={completion.finish_reason})"
        return Judgement(
            status=JudgementStatus.PARSE_ERROR,
            raw_output=completion.text,
            criteria=parsed.criteria,
            supporting_evidence=parsed.supporting_evidence,
            error=error,
            **common,
        )
    assert parsed.score is not None
    return Judgement(
        status=JudgementStatus.OK,
        score=parsed.score,
        normalized_score=round(parsed.score / 3, 6),
        expected_score=_rounded(expected_score(completion.tokens, completion.top_logprobs)),
        criteria=parsed.criteria,
        supporting_evidence=parsed.supporting_evidence,
        raw_output=completion.text,
        automated_label=automated_label(parsed.score, options.label_mapping),
        **common,
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(min(max(value, 0.0), 1.0), 6)


def request_for(mode: str) -> GenerationRequest:
    return COT_REQUEST if mode == "cot" else FAST_REQUEST


def _provenance(model: str, prompt: str, prompt_sha256: str, request: GenerationRequest, mode: str) -> Provenance:
    return Provenance(
        model=model,
        prompt=prompt,
        prompt_sha256=prompt_sha256,
        sampling={**request.describe(), "mode": mode},
        juiz_version=__version__,
    )


def item_fields(triple: Triple) -> dict[str, Any]:
    """What every judgement copies from its triple: the user's own fields, then the known ones.

    A user field named like a result field (e.g. a dataset's own `expected_score`) is kept as `input_<name>`, so it
    neither clashes with nor masquerades as juiz's value.
    """
    reserved = Judgement.model_fields.keys()
    return {
        **{f"input_{k}" if k in reserved else k: v for k, v in triple.passthrough().items()},
        "id": triple.id,
        "question": triple.question,
        "answer": triple.answer,
        "context": triple.context,
        "manual_label": triple.manual_label,
    }


def failed_judgement(triple: Triple, options: BatchOptions, model: str, reason: str) -> Judgement:
    """A `failed` result for an item that could not be graded at all, with the reason and the judge meant for it."""
    try:
        template = select_prompt(options, triple.question)
        prompt, prompt_sha = template.id, template.sha256
    except PromptError:
        prompt, prompt_sha = options.prompt or options.metric, ""
    provenance = _provenance(model, prompt, prompt_sha, request_for(options.mode), options.mode)
    return Judgement(**item_fields(triple), status=JudgementStatus.FAILED, error=reason, provenance=provenance)
