"""What each metric of an item is graded with: its prompt (the one the batch names for that metric, else the metric's
default version, in the item's language) and its sampling (`GenerationRequest`: CoT, the shorter per-segment CoT,
fast, or one yes/no token per check).

`validate_options` runs the same choice for every language a batch may meet, so a prompt id that can't be served
fails at intake, before any work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import prompts
from juiz.checks import CHECK_REQUEST
from juiz.engine import GenerationRequest
from juiz.errors import PromptError
from juiz.language import detect_language
from juiz.parsing import (
    COT_MAX_TOKENS,
    COT_REPLY_REGEX,
    SCORE_DIGITS,
    SEGMENT_MAX_TOKENS,
    SEGMENT_REPLY_REGEX,
)
from schemas import BatchOptions

COT_REQUEST = GenerationRequest(max_tokens=COT_MAX_TOKENS, regex=COT_REPLY_REGEX, logprobs=20)
# Fast mode: one forward pass; the reply is one digit and the expected score comes from its distribution.
FAST_REQUEST = GenerationRequest(max_tokens=1, choice=SCORE_DIGITS, logprobs=20)
# Context relevance in CoT mode: the same template with shorter bounds (it runs once per segment).
SEGMENT_COT_REQUEST = GenerationRequest(max_tokens=SEGMENT_MAX_TOKENS, regex=SEGMENT_REPLY_REGEX, logprobs=20)


def select_prompt(
    options: BatchOptions, question: str, metric: str | None = None, *, detected: str | None = None
) -> prompts.PromptTemplate:
    """The prompt for one item and metric (default: the options' main metric): the requested id for that metric,
    or the metric's default version, in the item's language (`detected`, when the caller has read it already)."""
    metric = metric or options.primary_metric
    item_lang = (detected or detect_language(question)) if options.lang == "auto" else options.lang
    version, lang = prompts.DEFAULT_VERSIONS[metric], item_lang
    for prompt_id in options.prompt_ids():
        try:
            prompt_metric, prompt_version, prompt_lang = prompts.parse_prompt_id(prompt_id)
        except (prompts.PromptNotFound, prompts.PromptSchemaError) as exc:
            raise PromptError(str(exc)) from exc
        if prompt_metric not in options.metrics:
            raise PromptError(
                f"prompt {prompt_id!r} is for {prompt_metric}, which is not among the metrics requested "
                f"({', '.join(options.metrics)})"
            )
        if prompt_metric == metric:
            version, lang = prompt_version, prompt_lang or item_lang  # an id without a language: the item's
    try:
        return prompts.load(metric, version, lang)
    except (prompts.PromptNotFound, prompts.PromptSchemaError) as exc:
        raise PromptError(str(exc)) from exc


def validate_options(options: BatchOptions) -> None:
    """Fail before any work when a prompt id can't be served in every language it may be asked for."""
    metrics = [prompts.parse_prompt_id(p)[0] for p in options.prompt_ids() if "@" in p]
    if len(metrics) != len(set(metrics)):
        raise PromptError("at most one prompt id per metric")
    for lang in (options.lang,) if options.lang != "auto" else prompts.LANGUAGES:
        for metric in options.metrics:
            select_prompt(options.model_copy(update={"lang": lang}), question="", metric=metric)


def request_for(mode: str, metric: str = "answer_relevance") -> GenerationRequest:
    if mode != "cot":
        return FAST_REQUEST
    return SEGMENT_COT_REQUEST if metric == "context_relevance" else COT_REQUEST


def prompt_version(options: BatchOptions, metric: str) -> str:
    """The prompt version a batch uses for a metric: the one its options name, else the metric's default."""
    for prompt_id in options.prompt_ids():
        prompt_metric, version, _ = prompts.parse_prompt_id(prompt_id)
        if prompt_metric == metric:
            return version
    return prompts.DEFAULT_VERSIONS[metric]


def request_for_options(options: BatchOptions, metric: str) -> GenerationRequest:
    """The sampling one metric of a batch gets: `request_for`, with options.samples replies at the batch's
    temperature (context relevance, graded once per segment, keeps one greedy reply). A check-based prompt's is
    one yes/no token per check, whatever the mode (options.samples does not apply: the probabilities are the
    spread)."""
    request = score_sampling(options, metric)
    try:
        checks = prompts.kind(metric, prompt_version(options, metric)) == "checks"
    except (prompts.PromptNotFound, prompts.PromptSchemaError) as exc:
        raise PromptError(str(exc)) from exc
    return CHECK_REQUEST if checks else request


def score_sampling(options: BatchOptions, metric: str) -> GenerationRequest:
    """The sampling a metric's score prompt gets (not a check-based one's): `request_for` the batch's mode, with
    options.samples replies at its temperature."""
    request = request_for(options.mode, metric)
    if metric == "context_relevance" or (options.samples == 1 and options.sampling_temperature == 0):
        return request
    return replace(request, n=options.samples, temperature=options.sampling_temperature)


@dataclass(frozen=True)
class MetricPlan:
    """How one metric of one item is graded: the prompt and the sampling."""

    template: prompts.PromptTemplate
    request: GenerationRequest


# Every metric a batch requests → its plan, in the batch's order of metrics.
ItemPlan = dict[str, MetricPlan]


def plan_item(options: BatchOptions, question: str) -> ItemPlan:
    """Every requested metric's prompt and sampling for one item, its language read once (not once per metric).

    The judge grades by this plan and the result cache keys on it, so the two never read the choice apart; the
    sampling comes from the chosen prompt itself (the batch's prompt ids are parsed once, in `select_prompt`).
    Raises PromptError when a metric's prompt can't be served.
    """
    detected = detect_language(question) if options.lang == "auto" else None
    return {metric: plan_metric(options, question, metric, detected=detected) for metric in options.metrics}


def plan_metric(options: BatchOptions, question: str, metric: str, *, detected: str | None = None) -> MetricPlan:
    """One metric's prompt and sampling for one item (`plan_item`, for one metric). Raises PromptError."""
    sampling = score_sampling(options, metric)
    template = select_prompt(options, question, metric, detected=detected)
    return MetricPlan(template, CHECK_REQUEST if template.kind == "checks" else sampling)
