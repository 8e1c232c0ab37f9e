"""One batch's page: histograms per metric, the confusion heat map, agreement with CIs, and the items table filtered,
sorted and paged on the server; the parts that move while it runs, for the page's script to swap in."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from urllib.parse import urlencode

from litestar import Controller, Request, Response, get
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath

from juiz.agreement.labels import VERDICT, default_verdict
from juiz.formats.progress_line import duration
from juiz.judging.progress import tokens_text
from juiz.runtime.errors import InputError
from juiz.store import BatchRecord, Store
from schemas import AgreementReport, BatchView
from schemas.labels import LabelMapping
from service.ownership import owned_batch
from service.rows import (
    SORT_KEYS,
    BatchIndex,
    agreement_of,
    expected_bins,
    field_names,
    judge_source,
    metric_label_agreement,
    metrics_present,
    page_of,
    row_cache,
    score_counts,
)
from service.ui import charts, session
from service.ui.exports import FILTERS as EXPORT_FILTERS
from service.ui.params import int_param, table_query
from service.ui.render import fragment, html, stamp
from service.views import batch_view

PER_PAGE = 50
MIN_PACE_S = 1.0


def pace(record: BatchRecord, cached: int = 0) -> float | None:
    """Judgements per second, or None when it means nothing: a batch over in under a second, or one mostly served
    from the result cache (its 'pace' was Redis reads, shown as ~1,000 judgements/s)."""
    view = batch_view(record)
    if view.judgements_per_s is None or record.started_at is None:
        return None
    if cached * 2 >= max(record.counts.done, 1):
        return None
    end = (record.finished_at or record.updated_at) if record.terminal else None
    if end is not None and end - record.started_at < MIN_PACE_S:
        return None
    return view.judgements_per_s


def conversations_text(view: BatchView) -> str:
    """`12/31 conversations (planned so far), 4,710 prompt tokens read, 42 tokens written`, "" before a worker reported
    any (or on a batch graded before)."""
    if not view.conversations_planned:
        return ""
    so_far = "" if view.planning_complete else " (planned so far)"
    tokens = tokens_text(view.tokens_written, view.tokens_read)
    return f"{view.conversations_done or 0}/{view.conversations_planned} conversations{so_far}{tokens}"


def eta_text(view: BatchView) -> str:
    """`ETA ~2m10s` while the batch runs and there is a rate; "" otherwise."""
    if view.eta_s is None or view.status.value not in ("queued", "running"):
        return ""
    return f"ETA ~{duration(view.eta_s)}"


class BatchPageController(Controller):
    """One batch: histograms per metric, agreement with its heat map, the items table filtered, sorted, paged."""

    path = "/"
    include_in_schema = False

    @get("/batches/{batch_id:str}", sync_to_thread=True)
    def batch(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
    ) -> Response[Any]:
        current = session.require(request)
        context = _batch_context(request, state, store, current, batch_id)
        return html("batch.html", **context)

    @get("/batches/{batch_id:str}/live", sync_to_thread=True)
    def live(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
    ) -> dict[str, Any]:
        """The parts of the batch page that move while it runs (scores, agreement, the items table under the page's
        own filters), rendered as the page renders them: its script swaps them in place, with no reload."""
        current = session.require(request)
        context = _batch_context(request, state, store, current, batch_id)
        record = context["record"]
        return {
            "terminal": record.terminal,
            "graded": context["graded"],
            "agreement_pending": not context["agreement_complete"],
            "html": {
                "scores-body": fragment("_scores.html", **context),
                "agreement-body": fragment("_agreement.html", **context),
                "items-body": fragment("_items.html", **context),
            },
        }

    @get("/batches/{batch_id:str}/agreement", sync_to_thread=True)
    def agreement(
        self,
        request: Request[Any, Any, Any],
        state: State,
        store: NamedDependency[Store],
        batch_id: FromPath[str],
    ) -> Response[Any]:
        """The agreement section alone: 202 while its bootstrap intervals are being computed, 200 once they are in
        (the page's script swaps it in then)."""
        current = session.require(request)
        record = owned_batch(store, current.tenant, batch_id)
        index = row_cache(state, store).index(record)
        report, complete, error = _agreement(index, store, record)
        return html(
            "_agreement.html",
            status_code=200 if complete else 202,
            record=record,
            agreement=report,
            agreement_complete=complete,
            agreement_error=error,
            heat_map=None if report is None else charts.heat_map(report.confusion_matrix, report.classes),
            judge_source=judge_source(index),
            judge_label_text=judge_label_source(
                index.mapping, judge_source(index) == VERDICT, metrics_present(index.rows)
            ),
            metric_labels=metric_label_agreement(index),
        )


def _batch_context(
    request: Request[Any, Any, Any], state: State, store: Store, current: session.Session, batch_id: str
) -> dict[str, Any]:
    """What the batch page draws, for its filters (the query string): the whole page, or its moving parts."""
    record = owned_batch(store, current.tenant, batch_id)
    index = row_cache(state, store).index(record)
    params = request.query_params
    mapping = record.options.label_mapping
    metrics = metrics_present(index.rows) or list(record.options.metrics)
    query = table_query(params)
    query.metric = (
        query.metric or mapping.metric or ("answer_relevance" if "answer_relevance" in metrics else metrics[0])
    )
    page = page_of(index, query, int_param(params.get("page")) or 1, PER_PAGE)
    cached = sum(1 for r in index.rows if r.cached)
    agreement, complete, agreement_error = _agreement(index, store, record)
    histograms = [
        (
            m,
            charts.score_histogram(score_counts(index.rows, m), m),
            charts.expected_histogram(expected_bins(index.rows, m), m),
        )
        for m in metrics
    ]
    query_fields = [(k, v) for k, v in params.items() if k != "page"]  # the queue's "this table's order"
    page_base = urlencode([(k, v) for k, v in params.items() if k != "page"])
    sort_base = urlencode([(k, v) for k, v in params.items() if k not in ("page", "sort", "dir")])
    return dict(
        session=current,
        signed_in=not session.open_api(request),
        record=record,
        pace=pace(record, cached),
        conversations=conversations_text(batch_view(record)),
        eta=eta_text(batch_view(record)),
        cached=cached,
        stamp=stamp,
        histograms=histograms,
        agreement=agreement,
        agreement_complete=complete,
        agreement_error=agreement_error,
        heat_map=None if agreement is None else charts.heat_map(agreement.confusion_matrix, agreement.classes),
        judge_source=judge_source(index),
        page=page,
        query=query,
        metrics=metrics,
        classes=[c.name for c in mapping.classes],
        page_base=page_base,
        query_fields=query_fields,
        sort_base=sort_base,
        sort_keys=SORT_KEYS,
        graded=index.covered,
        calibrated=any(r.calibrated_label is not None for r in index.rows),
        fields=field_names(index.rows),
        judge_label_text=judge_label_source(mapping, judge_source(index) == VERDICT, metrics_present(index.rows)),
        metric_labels=metric_label_agreement(index),
        filtered=any(params.get(name) for name in EXPORT_FILTERS),
        rule=index.rule,
        rubric=store.annotations.rubric(record.id),
        annotator=current.author,
        open_api=session.open_api(request),
    )


def judge_label_source(mapping: LabelMapping, verdict: bool = False, graded: Collection[str] = ()) -> str:
    """Which of the judge's grades gives its label, in words (what the agreement compares with the people's);
    `verdict`: the results were labelled by a verdict rule (the mapping's, or the default verdict of the `graded`
    metrics when it has none: the rule `label_rule` applied to them)."""
    if mapping.verdict or verdict:
        rule = "; ".join(
            f"{level.label} when " + " and ".join(f"{m} ≥ {v:g}" for m, v in level.when.items())
            for level in (mapping.verdict or default_verdict(graded))
        )
        return f"the verdict rule over several metrics ({rule}; otherwise {mapping.classes[0].name})"
    metric = mapping.metric or "the main metric (answer_relevance when graded)"
    signal = "expected score" if mapping.signal == "expected_score" else "score"
    return f"{metric}'s {signal}, through the label mapping"


def _agreement(index: BatchIndex, store: Store, record: BatchRecord) -> tuple[AgreementReport | None, bool, str | None]:
    """(report, complete, why there is none): a manual label the mapping doesn't know leaves the page without
    agreement (as /agreement answers 422) instead of failing the page."""
    try:
        report, complete = agreement_of(index, store.settings.agreement_max_work, final=record.terminal)
    except InputError as exc:
        return None, True, str(exc)
    return report, complete, None
