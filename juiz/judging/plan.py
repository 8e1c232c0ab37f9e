"""What each metric of an item is graded with: its prompt (the one the batch names for that metric, else the metric's
default version, in the item's language), its sampling (`GenerationRequest`: CoT, the shorter per-segment CoT,
fast, or one yes/no token per check), and the provenance every result of it records (the engine that grades it: its
model and its origin, e.g. vLLM's dtype; the prompt and its hash; the sampling). An item is planned once; later
steps read the plan and choose nothing again.

`validate_options` runs the same choice for every language a batch may meet, so a prompt id that can't be served
fails at intake, before any work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import prompts
from juiz import __version__
from juiz.calibration.features import CHECK_FEATURE
from juiz.engines.base import GenerationRequest, JudgeEngine
from juiz.judging.checks import ASKING_VERSION, CHECK_REQUEST, info_only
from juiz.judging.language import detect_language
from juiz.judging.parsing import (
    COT_MAX_TOKENS,
    COT_REPLY_GBNF,
    COT_REPLY_REGEX,
    SCORE_DIGITS,
    SEGMENT_MAX_TOKENS,
    SEGMENT_REPLY_GBNF,
    SEGMENT_REPLY_REGEX,
)
from juiz.runtime.errors import PromptError
from schemas import BatchOptions, Provenance, VerifierSpec
from schemas.verifier import VerifierRef

COT_REQUEST = GenerationRequest(max_tokens=COT_MAX_TOKENS, regex=COT_REPLY_REGEX, grammar=COT_REPLY_GBNF, logprobs=20)
# Fast mode: one forward pass; the reply is one digit and the expected score comes from its distribution.
FAST_REQUEST = GenerationRequest(max_tokens=1, choice=SCORE_DIGITS, logprobs=20)
# Context relevance in CoT mode: the same template with shorter bounds (it runs once per segment).
SEGMENT_COT_REQUEST = GenerationRequest(
    max_tokens=SEGMENT_MAX_TOKENS, regex=SEGMENT_REPLY_REGEX, grammar=SEGMENT_REPLY_GBNF, logprobs=20
)
# The mode a check-based prompt's results record: they are neither cot nor fast (one yes/no token per check).
CHECKS = "checks"


def select_prompt(options: BatchOptions, question: str, metric: str | None = None) -> prompts.PromptTemplate:
    """The prompt for one item and metric (default: the options' main metric): the requested id for that metric,
    or the metric's default version, in the item's language."""
    return _prompt_in(options, metric or options.primary_metric, item_language(options, question))


def item_language(options: BatchOptions, question: str) -> str:
    """The language an item's prompts are in: the batch's, or the one its question is written in (`lang: auto`)."""
    return detect_language(question) if options.lang == "auto" else options.lang


def _prompt_in(options: BatchOptions, metric: str, item_lang: str) -> prompts.PromptTemplate:
    """`select_prompt` for an item whose language is known; a prompt id without a language takes the item's."""
    version, lang = prompts.default_version(metric, options.metrics), item_lang
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
            version, lang = prompt_version, prompt_lang or item_lang
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


def score_sampling(options: BatchOptions, metric: str) -> GenerationRequest:
    """The sampling a metric's score prompt gets (not a check-based one's): `request_for` the batch's mode, with
    options.samples replies at its temperature."""
    request = request_for(options.mode, metric)
    if metric == "context_relevance" or (options.samples == 1 and options.sampling_temperature == 0):
        return request
    return replace(request, n=options.samples, temperature=options.sampling_temperature)


def shows_context(metric: str, template: prompts.PromptTemplate) -> bool:
    """Whether the metric's prompt shows the item's whole context: groundedness's, and every check-based prompt's
    (an item's checks share one prefix, the context included); context relevance shows one segment at a time."""
    return metric == "groundedness" or template.kind == "checks"


@dataclass(frozen=True)
class MetricPlan:
    """How one metric of one item is graded (the prompt and the sampling), and what its result records."""

    template: prompts.PromptTemplate
    request: GenerationRequest
    provenance: Provenance
    # A check-based prompt's info checks that its rule never reads are asked only when the batch's calibration reads
    # them (`info_checks_wanted`).
    info_checks: bool = False


# Every metric a batch requests → its plan, in the batch's order of metrics.
ItemPlan = dict[str, MetricPlan]


def plan_item(options: BatchOptions, question: str, engine: JudgeEngine) -> ItemPlan:
    """Every requested metric's prompt, sampling and provenance for one item (graded by `engine`), its language read
    once (not once per metric).

    The judge grades by this plan, the result cache keys on it and every result records it, so none of them reads the
    choice apart. Raises PromptError when a metric's prompt can't be served.
    """
    planned = plan_or_reason(options, question, engine)
    if planned.error is not None:
        raise planned.error
    assert planned.plan is not None  # no error: every metric is planned
    return planned.plan


def info_checks_wanted(options: BatchOptions, metric: str, template: prompts.PromptTemplate) -> bool:
    """Whether a check-based prompt's info checks that its rule never reads are asked: only when the batch's
    calibration reads one of them (a feature `<metric>.check.<name>`); otherwise they would cost a conversation each
    and move nothing."""
    if options.calibration is None or template.kind != "checks":
        return False
    wanted = {f"{metric}.{CHECK_FEATURE}.{name}" for name in info_only(template)}
    return bool(wanted & set(options.calibration.features))


def provenance_of(
    engine: JudgeEngine,
    metric: str,
    template: prompts.PromptTemplate | None,
    request: GenerationRequest,
    mode: str,
    info_checks: bool = False,
    context_chars: int | None = None,
) -> Provenance:
    """What a result of `metric` graded by `engine` with `template` and `request` records: the engine (its model and
    its origin: a judge server's back end and host, vLLM's dtype), the prompt, the sampling, and the mode (`checks`
    for a check-based prompt, whatever the batch's mode), the rule version it was graded under and how its checks
    were asked (`asking`: checks.ASKING_VERSION; `info_checks`: whether the info checks its rule never reads were
    asked), and, for a prompt that shows the whole context, the context's budget (`context_chars`: a cut context is
    another conversation). A metric whose prompt can't be served (`template` None) records the metric's name as its
    prompt and the batch's mode."""
    checks = template is not None and template.kind == "checks"
    graded_under: dict[str, object] = {"mode": CHECKS if checks else mode}
    if template is not None and template.rule is not None:
        graded_under["rule"] = template.rule.version
    if checks:
        graded_under["asking"] = ASKING_VERSION
        graded_under["info_checks"] = info_checks
    if template is not None and shows_context(metric, template):
        graded_under["context_chars"] = context_chars
    return Provenance.model_validate(
        {
            "model": engine.model_id,
            "prompt": template.id if template is not None else metric,
            "prompt_sha256": template.sha256 if template is not None else "",
            "sampling": {**request.describe(), **graded_under},
            "juiz_version": __version__,
            **engine.origin,
        }
    )


@dataclass(frozen=True)
class PlannedItem:
    """One item as planned for grading: its plan, or the error that stops it (a prompt that can't be served: the item
    fails with that reason, alone); and what each metric's result records either way, so a failed result, whenever
    it is made, needs no second planning."""

    plan: ItemPlan | None
    error: PromptError | None
    provenance: Mapping[str, Provenance]

    @property
    def reason(self) -> str | None:
        return None if self.error is None else f"{type(self.error).__name__}: {self.error}"


def plan_or_reason(options: BatchOptions, question: str, engine: JudgeEngine) -> PlannedItem:
    """`plan_item`, or the first metric's PromptError as the reason the item can't be graded. Every metric records a
    provenance: its plan's, or, for one whose prompt can't be served, the metric's name as its prompt and the mode's
    sampling."""
    item_lang = item_language(options, question)
    plan: ItemPlan = {}
    provenance: dict[str, Provenance] = {}
    error: PromptError | None = None
    for metric in options.metrics:
        template: prompts.PromptTemplate | None = None
        try:
            template = _prompt_in(options, metric, item_lang)
        except PromptError as exc:
            error = error or exc
        # The sampling comes from the chosen prompt itself: a check-based one asks one yes/no token per check.
        checks = template is not None and template.kind == "checks"
        request = CHECK_REQUEST if checks else score_sampling(options, metric)
        info = template is not None and info_checks_wanted(options, metric, template)
        provenance[metric] = provenance_of(engine, metric, template, request, options.mode, info, options.context_chars)
        if metric == "groundedness" and options.verifier is not None:
            error = error or _verifier_unusable(options.verifier, engine)
            verifier = VerifierRef(version=options.verifier.version, cut=options.verifier.cut)
            provenance[metric] = provenance[metric].model_copy(update={"verifier": verifier})
        if template is not None:
            plan[metric] = MetricPlan(template, request, provenance[metric], info)
    return PlannedItem(plan if error is None else None, error, provenance)


def _verifier_unusable(verifier: VerifierSpec, engine: JudgeEngine) -> PromptError | None:
    """Why a verifier can't read this engine's answers: it reads hidden states of the model it was trained on."""
    if verifier.model != engine.model_id:
        return PromptError(
            f"verifier {verifier.version} reads the states of {verifier.model}; this judge is {engine.model_id}"
        )
    return None


def provenance_by_metric(options: BatchOptions, question: str, engine: JudgeEngine) -> Mapping[str, Provenance]:
    """What each metric of an item that was never planned records (`plan_or_reason`'s provenance)."""
    return plan_or_reason(options, question, engine).provenance
