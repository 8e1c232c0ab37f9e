"""The result cache's rules: what a cached result is keyed on, what it keeps, and when a result may be reused (a hit
becomes a result in `juiz.judging.judgements.from_cache`). Redis holds the entries (`juiz.store.cache`); the worker
consults both.

Keyed per tenant (shared across tenants only with `shared_result_cache`), on the question, answer, context, and every
requested metric's provenance as the item's plan records it: the engine that grades (the model and its origin:
vLLM's dtype, llama.cpp's quantisation, a judge server's back end and host), the prompt and its hash, the sampling.
A reused result keeps every metric and is marked `cached: true`; the batch's label mapping and calibration are
applied afresh.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from juiz.judging.plan import ItemPlan
from prompts.neutralise import VERSION as NEUTRALISER
from schemas import BatchOptions, Judgement, JudgementStatus, Triple
from schemas.judgement import CheckStatus, MetricStatus

# What a cached result leaves out: the item's own fields (taken from the new item) and what the batch's label mapping
# and calibration make of the grade (recomputed on reuse). Everything else — every metric, samples, provenance — is
# kept, so a cached result is the same result.
NOT_CACHED = frozenset(
    {
        "id",
        "question",
        "answer",
        "context",
        "manual_label",
        "annotations",
        "automated_label",
        "label_source",
        "calibrated",
        "uncertain",
        "uncertainty",
        "cached",
    }
)


# What a metric's provenance records that does not change its grade: juiz's own version (a release that changes what a
# prompt says changes the prompt file's hash or NEUTRALISER, both in the key) and the calibration (applied afresh to a
# hit; a plan has none).
UNKEYED_PROVENANCE = frozenset({"juiz_version", "calibration"})


def cache_key(triple: Triple, options: BatchOptions, plan: ItemPlan, tenant: str | None) -> str:
    """sha256 of everything a grade depends on: the question, the answer, the context, and each metric's provenance as
    `plan` (the item's `plan_item`, which the judge grades by) records it: the engine (its model and origin), the
    prompt (id and file hash) and the sampling; and the tenant, so one tenant's cache never answers (or reveals)
    another's request unless `shared_result_cache` is set (tenant=None). Ids and labels do not change the grade.

    The engine's whole origin is keyed: the same model in bfloat16 and in float32 differs in a check's P(yes) by up
    to ~0.02, and a judge server's dtype and quantisation are not visible to juiz (its back end and host are the
    handle on them). So a hit records the engine, prompt and sampling a fresh grade would."""
    # Every requested metric, in order, with its own provenance: a result graded for [answer_relevance] never answers
    # a request for [answer_relevance, groundedness].
    judges = [
        [metric, p.provenance.model_dump(mode="json", exclude=set(UNKEYED_PROVENANCE))] for metric, p in plan.items()
    ]
    context = (
        [segment.model_dump(mode="json") for segment in triple.context]
        if isinstance(triple.context, list)
        else triple.context
    )
    payload = [triple.question, triple.answer, context, judges, options.mode, tenant, NEUTRALISER]
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


def reusable(judgement: Judgement) -> bool:
    """Whether a result may answer the same triple later: only a clean grade. A parse error may come from the engine
    dropping a request (an empty reply with finish_reason=error), and a check that failed (aborted when its batch
    was cancelled, timed out) leaves its metric graded from the other checks; a later call would repeat neither, and
    a cached result missing a check's probability can't be calibrated."""
    if judgement.status is not JudgementStatus.OK:
        return False
    for metric in (judgement.metrics or {}).values():
        if metric.status is not MetricStatus.OK and metric.status is not MetricStatus.SKIPPED:
            return False
        if any(check.status is CheckStatus.FAILED for check in metric.checks or []):
            return False
    return True


def cacheable(judgement: Judgement) -> dict[str, Any]:
    """What the cache keeps of a result: the grade (every metric, samples, provenance), not the item's own fields
    nor what the batch's label mapping and calibration make of it (recomputed on reuse)."""
    value = judgement.model_dump(mode="json", exclude=set(NOT_CACHED))
    return {k: v for k, v in value.items() if k in Judgement.model_fields}  # the user's passthrough is the item's
