"""A compact per-batch index of graded items, so the web page can filter, sort and page 10,000 results without
reading them all for every page.

The index holds one small `Row` per stored result (scores, labels, where the full result sits in the results list).
It is built once per batch and API process, then extended with the results stored since (results are append-only),
and rebuilt when the batch's `labels_version` moved (a manual label changed elsewhere). A page of the items table
reads only its own rows' full results. Agreement and the charts are derived from the rows and cached per
(results count, labels version), so a finished batch computes them once.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from litestar.datastructures import State

from juiz.agreement.labels import (
    VERDICT,
    class_of_label,
    class_of_score,
    label_for,
    label_source,
    metric_of,
    resolve_numeric_scale,
)
from juiz.agreement.statistics import Signal, compute_agreement
from juiz.runtime.errors import InputError
from juiz.store import BatchRecord, Store
from juiz.store.annotations import consensus_label
from schemas import AgreementReport, Judgement
from schemas.agreement import CalibratedAgreement
from schemas.annotation import Annotation, ConsensusRule
from schemas.calibration import CalibratedGrade
from schemas.judgement import METRICS, JudgementStatus, MetricStatus
from schemas.labels import LabelMapping
from schemas.triple import Label
from service.agreement import capped_resamples, name_reference

log = logging.getLogger(__name__)

READ_PAGE = 2000
QUESTION_CHARS = 160
CACHED_BATCHES = 8
# The page's bootstrap: enough for a 95% interval to two decimals, and a page drawn in about a second on 2 cores
# (compute_agreement costs ~10 ms per resample). None while the batch runs: the figures move anyway.
PAGE_RESAMPLES = 200

# One bootstrap at a time per API process (each holds resamples × items values while it runs).
_BOOTSTRAPS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ui-agreement")

SortKey = Literal["disagreement", "index", "score", "expected", "uncertainty", "status", "id"]
SORT_KEYS: tuple[str, ...] = ("disagreement", "index", "score", "expected", "uncertainty", "status", "id")


@dataclass(frozen=True, slots=True)
class MetricCell:
    status: str
    score: int | None
    expected: float | None

    @property
    def uncertainty(self) -> float | None:
        """How far the judge's expected score (Σ p(k)·k / 3) sits from the score it wrote, on 0–1: 0 when all the
        probability was on that score, ~0.5 when it was split between far-apart scores."""
        if self.score is None or self.expected is None:
            return None
        return abs(self.expected - self.score / 3)


@dataclass(frozen=True, slots=True)
class Row:
    position: int  # in the batch's results list
    index: int  # in the batch's input order
    id: str
    status: str
    score: int | None  # the top-level (primary metric) score the agreement compares
    normalized_score: float | None
    manual_label: Label | None
    judge_label: str | None
    judge_class: int | None
    question: str
    metrics: dict[str, MetricCell]
    uncertainty: float | None = None  # the result's own `uncertainty.score`, when it has one
    uncertain: bool | None = None  # flagged for a human look
    calibrated_label: str | None = None  # with options.calibration
    cached: bool = False  # served from the result cache: no engine time behind it
    fields: dict[str, str] = field(default_factory=dict)  # the item's own scalar extra fields, as text (metadata)
    label_source: str | None = None  # what gives judge_label: "verdict" or the metric read alone
    annotations: tuple[Annotation, ...] = ()  # every annotator's label (the manual_label is their consensus)
    text: str = ""  # question and answer, case-folded: what the table's search reads


@dataclass(frozen=True, slots=True)
class ViewRow:
    """A row as the table shows it under one metric, with its disagreement."""

    row: Row
    cell: MetricCell | None
    manual_class: int | None
    disagreement: int | None  # |manual class − judge class|; None when either is missing
    judge_class: int | None = None  # under the shown metric
    manual_name: str | None = None  # the manual label as its class name (aliases and numbers resolved)
    judge_name: str | None = None

    @property
    def status(self) -> str:
        """The shown metric's status (an item can be ok overall with this metric skipped), else the item's."""
        return self.row.status if self.cell is None else self.cell.status

    @property
    def uncertainty(self) -> float | None:
        """The result's own uncertainty score when the judge gave one, else the metric's expected-score
        distance; both on 0–1."""
        if self.row.uncertainty is not None:
            return self.row.uncertainty
        return None if self.cell is None else self.cell.uncertainty


@dataclass
class Query:
    status: str = ""
    metric: str = ""
    score: int | None = None
    label: str = ""  # a manual class name, "none" for unlabelled, "" for any
    disagreement: str = ""  # "yes", "no" or ""
    min_uncertainty: float | None = None
    uncertain: bool = False  # only results the judge flagged `uncertain`
    field: str = ""  # an extra field (metadata) of the items: only items that have it…
    value: str = ""  # …and whose value contains this (case-insensitive)
    search: str = ""  # words the question or answer contains, each (case-insensitive)
    sort: str = "disagreement"
    descending: bool = True


@dataclass
class Page:
    rows: list[ViewRow]
    total: int  # rows matching the filters
    page: int
    pages: int


@dataclass(frozen=True)
class CachedAgreement:
    """The agreement section's figures for one state of the rows and labels: intervals in once `complete`."""

    key: tuple[int, int, bool]  # (rows covered, labels version, batch final)
    report: AgreementReport
    complete: bool
    by_metric: dict[str, AgreementReport]  # metric_label_agreement's, with the same resamples as `report`


@dataclass
class BatchIndex:
    batch_id: str
    mapping: LabelMapping
    labels_version: int = -1
    rule: ConsensusRule = field(default_factory=ConsensusRule)  # what made each row's manual_label of its annotations
    rows: list[Row] = field(default_factory=list)
    by_index: dict[int, Row] = field(default_factory=dict)
    by_id: dict[str, Row] = field(default_factory=dict)
    agreement: CachedAgreement | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def covered(self) -> int:
        return len(self.rows)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        self.by_index[row.index] = row
        self.by_id.setdefault(row.id, row)  # ids may repeat: the first graded keeps it

    def replace(self, row: Row) -> None:
        self.rows[row.position] = row
        self.by_index[row.index] = row
        if self.by_id.get(row.id, row).position == row.position:
            self.by_id[row.id] = row


def row_of(position: int, index: int, judgement: Judgement, mapping: LabelMapping) -> Row:
    metrics: dict[str, MetricCell] = {}
    for name in METRICS:
        result = metric_of(judgement, name)
        if result is not None:
            metrics[name] = MetricCell(result.status.value, result.score, result.expected_score)
    judge_label = label_for(judgement, mapping)
    judge_class = None if judge_label is None else [c.name for c in mapping.classes].index(judge_label)
    question = (
        judgement.question if len(judgement.question) <= QUESTION_CHARS else judgement.question[:QUESTION_CHARS] + "…"
    )
    calibrated = getattr(judgement, "calibrated", None)
    uncertainty = getattr(judgement, "uncertainty", None)
    return Row(
        position=position,
        index=index,
        id=judgement.id,
        status=judgement.status.value,
        score=judgement.score,
        normalized_score=judgement.normalized_score,
        manual_label=judgement.manual_label,
        judge_label=judge_label,
        judge_class=judge_class,
        question=question,
        metrics=metrics,
        uncertainty=None if uncertainty is None else uncertainty.score,
        uncertain=getattr(judgement, "uncertain", None),
        calibrated_label=None if calibrated is None else calibrated.label,
        cached=bool(getattr(judgement, "cached", False)),
        fields=metadata_of(judgement),
        label_source=label_source(judgement, mapping),
        annotations=tuple(judgement.annotations or ()),
        text=f"{judgement.question}\n{judgement.answer}".casefold(),
    )


INTERNAL_FIELDS = frozenset(
    {"manual_label_by", "manual_label_at", "uploaded_label"}
)  # juiz's own extras, not the uploader's
FIELD_CHARS = 80
MAX_FIELDS = 30


def metadata_of(judgement: Judgement) -> dict[str, str]:
    """The uploader's scalar extra fields (course, speaker, split…) as short text: what the table filters and
    shows as a column. Lists and objects are left to the item page."""
    out: dict[str, str] = {}
    for name, value in (judgement.model_extra or {}).items():
        if name in INTERNAL_FIELDS or isinstance(value, dict | list) or value is None:
            continue
        text = str(value)
        out[name] = text if len(text) <= FIELD_CHARS else text[:FIELD_CHARS] + "…"
    return out


def field_names(rows: Iterable[Row]) -> list[str]:
    """The extra fields the batch's items have, for the table's field filter (the first MAX_FIELDS, sorted)."""
    seen: set[str] = set()
    for row in rows:
        seen.update(row.fields)
        if len(seen) > MAX_FIELDS:
            break
    return sorted(seen)[:MAX_FIELDS]


class RowCache:
    """Per-process cache of BatchIndex objects, least recently used dropped first."""

    def __init__(self, store: Store, size: int = CACHED_BATCHES) -> None:
        self.store = store
        self.size = size
        self._indexes: OrderedDict[str, BatchIndex] = OrderedDict()
        self._lock = threading.Lock()

    def index(self, batch: BatchRecord) -> BatchIndex:
        """The batch's index, brought up to date with the store (new results; labels changed elsewhere)."""
        with self._lock:
            index = self._indexes.get(batch.id)
            if index is None:
                index = BatchIndex(batch.id, batch.options.label_mapping)
                self._indexes[batch.id] = index
            self._indexes.move_to_end(batch.id)
            while len(self._indexes) > self.size:
                self._indexes.popitem(last=False)
        with index.lock:
            version = self.store.labels_version(batch.id)
            if version != index.labels_version:
                index.rows.clear()
                index.by_index.clear()
                index.by_id.clear()
                index.labels_version = version
                index.rule = self.store.annotations.rule(batch.id)
            while True:
                entries = self.store.result_entries(batch.id, index.covered, READ_PAGE)
                for position, item_index, raw in entries:
                    index.add(row_of(position, item_index, Judgement.model_validate_json(raw), index.mapping))
                if len(entries) < READ_PAGE:
                    break
        return index

    def updated(self, batch: BatchRecord, position: int, judgement: Judgement, version: int) -> None:
        """This process changed a label (the change made labels_version `version`): patch its row instead of
        rebuilding the index — unless another change came in between, which the next `index` call rebuilds for."""
        with self._lock:
            index = self._indexes.get(batch.id)
        if index is None:
            return
        with index.lock:
            if index.labels_version != version - 1 or position >= index.covered:
                return
            index.replace(row_of(position, index.rows[position].index, judgement, index.mapping))
            index.labels_version = version
            index.agreement = None

    def forget(self, batch_id: str) -> None:
        with self._lock:
            self._indexes.pop(batch_id, None)


def row_cache(state: State, store: Store) -> RowCache:
    """The API process's one RowCache (kept on the app's state), made anew when the store is another one."""
    cache: RowCache | None = getattr(state, "ui_rows", None)
    if cache is None or cache.store is not store:
        cache = RowCache(store)
        state.ui_rows = cache
    return cache


def manual_classes(rows: Sequence[Row], mapping: LabelMapping) -> list[int | None]:
    """Each row's manual class (None: unlabelled, or a label the mapping doesn't know)."""
    scale = resolve_numeric_scale([r.manual_label for r in rows], mapping)
    classes: list[int | None] = []
    for row in rows:
        if row.manual_label is None:
            classes.append(None)
            continue
        try:
            classes.append(class_of_label(row.manual_label, mapping, scale))
        except InputError:
            classes.append(None)
    return classes


def default_metric(mapping: LabelMapping) -> str:
    """The metric the mapping's own judge label reads (its verdict rule, when it has one, is shown under it)."""
    return mapping.metric or "answer_relevance"


def metric_class(cell: MetricCell | None, mapping: LabelMapping) -> int | None:
    """The judge's class under one metric: from that metric's own ok score."""
    if cell is None or cell.status != MetricStatus.OK.value or cell.score is None:
        return None
    return class_of_score(cell.score, mapping)


def judge_source(index: BatchIndex) -> str | None:
    """What the judge's labels of this batch come from, as the page names it: "verdict" when any row's does (the
    rule over several metrics), else the metric read alone; None before any row."""
    sources = {r.label_source for r in index.rows if r.label_source is not None}
    return VERDICT if VERDICT in sources else next(iter(sorted(sources)), None)


def view_rows(index: BatchIndex, metric: str) -> list[ViewRow]:
    """The rows under `metric`: its cell, its judge class (the mapping's own label for the default metric, else the
    class of this metric's score) and the disagreement with the manual label on that class."""
    rows, mapping = index.rows, index.mapping
    names = [c.name for c in mapping.classes]
    own = metric == default_metric(mapping)
    out = []
    for row, manual in zip(rows, manual_classes(rows, mapping), strict=True):
        cell = row.metrics.get(metric)
        judge = row.judge_class if own and row.label_source != VERDICT else metric_class(cell, mapping)
        disagreement = None if manual is None or judge is None else abs(manual - judge)
        out.append(
            ViewRow(
                row,
                cell,
                manual,
                disagreement,
                judge,
                None if manual is None else names[manual],
                None if judge is None else names[judge],
            )
        )
    return out


def _matches(view: ViewRow, query: Query, mapping: LabelMapping) -> bool:
    row, cell = view.row, view.cell
    if query.status and view.status != query.status:
        return False
    if query.score is not None and (cell is None or cell.score != query.score):
        return False
    if query.label == "none" and row.manual_label is not None:
        return False
    if query.label and query.label != "none":
        names = [c.name for c in mapping.classes]
        if query.label not in names or view.manual_class != names.index(query.label):
            return False
    if query.disagreement == "yes" and not view.disagreement:
        return False
    if query.disagreement == "no" and view.disagreement != 0:
        return False
    if query.min_uncertainty is not None:
        uncertainty = view.uncertainty
        if uncertainty is None or uncertainty < query.min_uncertainty:
            return False
    if query.field:
        value = row.fields.get(query.field)
        if value is None or (query.value and query.value.casefold() not in value.casefold()):
            return False
    if query.search and not all(word in row.text for word in query.search.casefold().split()):
        return False
    return bool(row.uncertain) or not query.uncertain


def _sort_value(view: ViewRow, key: str) -> tuple[int, float | str]:
    """(present?, value): missing values sort last in either direction."""
    cell = view.cell
    value: float | str | None
    if key == "disagreement":
        value = view.disagreement
    elif key == "score":
        value = None if cell is None else cell.score
    elif key == "expected":
        value = None if cell is None else cell.expected
    elif key == "uncertainty":
        value = view.uncertainty
    elif key == "status":
        value = view.status
    elif key == "id":
        value = view.row.id
    else:
        value = view.row.index
    return (0, 0.0) if value is None else (1, value)


def page_of(index: BatchIndex, query: Query, page: int, per_page: int) -> Page:
    """Filter, sort (ties: input order; disagreements first then the most uncertain by default) and page."""
    metric = query.metric or default_metric(index.mapping)
    matching = [v for v in view_rows(index, metric) if _matches(v, query, index.mapping)]
    matching.sort(key=lambda v: v.row.index)
    if query.sort == "disagreement":
        # Stable sorts: uncertainty breaks ties among equal disagreements.
        matching.sort(key=lambda v: _sort_value(v, "uncertainty"), reverse=query.descending)
    matching.sort(key=lambda v: _sort_value(v, query.sort), reverse=query.descending)
    if query.descending:
        # reverse=True put missing values first; move them back to the end, keeping their order.
        present = [v for v in matching if _sort_value(v, query.sort)[0]]
        matching = present + [v for v in matching if not _sort_value(v, query.sort)[0]]
    pages = max(1, -(-len(matching) // per_page))
    page = min(max(page, 1), pages)
    start = (page - 1) * per_page
    return Page(matching[start : start + per_page], len(matching), page, pages)


def calibrated_signal(mapping: LabelMapping) -> Signal:
    """The calibrated label (options.calibration) as a judge signal for compute_agreement."""
    names = [c.name for c in mapping.classes]

    def read(j: Judgement) -> tuple[int, float, float] | None:
        label = None if j.calibrated is None else j.calibrated.label
        if label is None or label not in names:
            return None
        position = names.index(label)
        scores = mapping.classes[position].scores
        return position, float(position), sum(scores) / len(scores) / 3.0

    return read


AgreementKey = tuple[int, int, bool]


def _judgements(index: BatchIndex) -> list[Judgement]:
    """The rows as judgements holding only what compute_agreement reads."""
    return [
        Judgement.model_construct(
            id=r.id,
            status=JudgementStatus(r.status),
            score=r.score,
            normalized_score=r.normalized_score,
            manual_label=r.manual_label,
            annotations=list(r.annotations) or None,
            calibrated=None if r.calibrated_label is None else CalibratedGrade(label=r.calibrated_label),
        )
        for r in index.rows
    ]


def _graded_by_id(grades: dict[str, tuple[int, float, float] | None]) -> Signal:
    def read(judgement: Judgement) -> tuple[int, float, float] | None:
        return grades.get(judgement.id)

    return read


def metric_label_agreement(index: BatchIndex) -> dict[str, AgreementReport]:
    """The per-metric rows of the agreement section `agreement_of` computed last (with intervals once it is
    complete); computed as points when it has not run."""
    with index.lock:
        cached = index.agreement
        rows = list(index.rows)
    return cached.by_metric if cached is not None else _metric_label_reports(rows, index.mapping, index.rule, 0)


def _metric_label_reports(
    rows: Sequence[Row], mapping: LabelMapping, consensus: ConsensusRule, resamples: int
) -> dict[str, AgreementReport]:
    """For each metric somebody labelled alone (an annotation with that `metric`): the metric's own judge class
    against the reference those labels make under the batch's consensus rule, on the items labelled so."""
    out: dict[str, AgreementReport] = {}
    for metric in METRICS:
        rule = consensus.model_copy(update={"metric": metric})
        judgements: list[Judgement] = []
        grades: dict[str, tuple[int, float, float] | None] = {}
        for row in rows:
            about = [a for a in row.annotations if a.metric == metric]
            if not about:
                continue
            cell = row.metrics.get(metric)
            judge = metric_class(cell, mapping)
            label = consensus_label(about, rule, mapping, row.id)
            judgements.append(Judgement.model_construct(id=row.id, status=JudgementStatus.OK, manual_label=label))
            score = None if cell is None else cell.score
            grades[row.id] = None if judge is None or score is None else (judge, float(score), score / 3.0)
        if judgements:
            out[metric] = compute_agreement(judgements, mapping, resamples=resamples, signal=_graded_by_id(grades))
    return out


def _compute(
    judgements: list[Judgement], mapping: LabelMapping, resamples: int, rule: ConsensusRule | None = None
) -> AgreementReport:
    report = compute_agreement(judgements, mapping, resamples=resamples)
    name_reference(report, judgements, mapping, rule or ConsensusRule())
    if any(j.calibrated is not None for j in judgements):
        # Raw beside calibrated on the same items: those with a calibrated label.
        same = [j for j in judgements if j.calibrated is not None and j.calibrated.label is not None]
        report.calibration = CalibratedAgreement(
            features=[],
            n=sum(1 for j in same if j.manual_label is not None),
            raw=compute_agreement(same, mapping, resamples=resamples),
            calibrated=compute_agreement(same, mapping, resamples=resamples, signal=calibrated_signal(mapping)),
        )
    return report


def agreement_of(index: BatchIndex, max_work: int, *, final: bool) -> tuple[AgreementReport, bool]:
    """(report, complete): compute_agreement over the rows, cached until results or labels change.

    The point figures are computed at once (well under a second on 10,000 items). Once the batch is `final`, the
    bootstrap intervals (resamples capped by `max_work` / items, as the API's /agreement caps them) are computed in
    a background thread — seconds on a large batch — and the report is `complete` once they are in; the page fetches
    them then. While the batch runs there are no intervals: its figures move anyway.
    """
    key: AgreementKey = (index.covered, index.labels_version, final)
    with index.lock:
        cached = index.agreement
        if cached is not None and cached.key == key:
            return cached.report, cached.complete
        judgements = _judgements(index)
        rows = list(index.rows)
    points = _compute(judgements, index.mapping, 0, index.rule)
    by_metric = _metric_label_reports(rows, index.mapping, index.rule, 0)
    resamples = capped_resamples(PAGE_RESAMPLES, len(judgements), max_work)
    complete = not final or resamples == 0 or not judgements
    with index.lock:
        index.agreement = CachedAgreement(key, points, complete, by_metric)
    if complete:
        return points, True

    def bootstrap() -> None:
        try:
            report = _compute(judgements, index.mapping, resamples, index.rule)
            # Per-metric labels are a subset of the items: the same resamples cost no more than the main report's.
            report_by_metric = _metric_label_reports(rows, index.mapping, index.rule, resamples)
        except Exception:  # never leave the page waiting: it keeps the points, without intervals
            log.exception("agreement bootstrap of batch %s failed", index.batch_id)
            report, report_by_metric = points, by_metric
        with index.lock:
            if index.agreement is not None and index.agreement.key == key:
                index.agreement = CachedAgreement(key, report, True, report_by_metric)

    _BOOTSTRAPS.submit(bootstrap)
    return points, False


def score_counts(rows: Iterable[Row], metric: str) -> dict[str, int]:
    """How many items got each 0–3 score under `metric`, and how many have no score (by why)."""
    counts = {str(k): 0 for k in range(4)}
    for row in rows:
        cell = row.metrics.get(metric)
        if cell is None:
            continue
        if cell.status == MetricStatus.OK.value and cell.score is not None:
            counts[str(cell.score)] += 1
        else:
            counts[cell.status] = counts.get(cell.status, 0) + 1
    return counts


def expected_bins(rows: Iterable[Row], metric: str, bins: int = 10) -> list[int]:
    """Histogram of the expected score (0–1) under `metric`, in `bins` equal bins."""
    counts = [0] * bins
    for row in rows:
        cell = row.metrics.get(metric)
        if cell is not None and cell.expected is not None:
            counts[min(int(cell.expected * bins), bins - 1)] += 1
    return counts


def metrics_present(rows: Iterable[Row]) -> list[str]:
    seen: set[str] = set()
    for row in rows:
        seen.update(row.metrics)
    return [m for m in METRICS if m in seen]
