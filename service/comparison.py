"""Two of a tenant's batches compared: the one computation behind GET /v1/compare and the /ui/compare page.

Both read the batches' stored results whole (question, answer and context included), so items are paired the same
way (by id, or by the triple's content key when the runs share no id), a label reaches only the runs that graded its
triple, and each result's judge class is read from its grades by batch a's label mapping.
"""

from __future__ import annotations

from dataclasses import dataclass

from juiz.agreement.compare import compare_items
from juiz.store import BatchRecord, Store
from schemas import Judgement
from schemas.compare import ComparedItem, CompareReport
from service.agreement import capped_resamples
from service.ownership import owned_batch


@dataclass(frozen=True)
class Runs:
    """Two batches' stored results, read once: a comparison's points and its bootstrap both use them."""

    a: BatchRecord
    b: BatchRecord
    results_a: list[tuple[int, Judgement]]
    results_b: list[tuple[int, Judgement]]


@dataclass(frozen=True)
class Comparison:
    report: CompareReport
    items: list[ComparedItem]  # every shared item (the report lists only those whose judge label changed)

    def listed(self, kind: str) -> list[ComparedItem]:
        """The items of one of the report's lists: changed, fixed, regressed, unchanged or sideways."""
        if kind == "changed":
            return list(self.report.changed)
        ids = set(getattr(self.report, kind))
        return [i for i in self.items if i.id in ids]


def indexed_results(store: Store, batch_id: str) -> list[tuple[int, Judgement]]:
    """(input index, judgement) of every stored result."""
    count = store.result_count(batch_id)
    if not count:
        return []
    return [(index, Judgement.model_validate_json(raw)) for _, index, raw in store.result_entries(batch_id, 0, count)]


def load_runs(store: Store, tenant: str, a: str, b: str) -> Runs:
    """Both batches' results; 404 unless both are the tenant's."""
    record_a, record_b = owned_batch(store, tenant, a), owned_batch(store, tenant, b)
    return Runs(record_a, record_b, indexed_results(store, record_a.id), indexed_results(store, record_b.id))


def compare_loaded(store: Store, runs: Runs, resamples: int) -> Comparison:
    """Run b against run a, batch a's label mapping naming the classes of both. Two reports over the shared items:
    each gets half the agreement work budget (resamples × items, the items at most the smaller run's, whether paired
    by id or by content). InputError when either has nothing graded."""
    shared = min(len(runs.results_a), len(runs.results_b))
    used = capped_resamples(resamples, shared, store.settings.agreement_max_work // 2)
    report, items = compare_items(
        runs.a.id, runs.results_a, runs.b.id, runs.results_b, runs.a.options.label_mapping, resamples=used
    )
    return Comparison(report, items)


def compare_batches(store: Store, tenant: str, a: str, b: str, resamples: int) -> Comparison:
    """Batch b against batch a, both the tenant's (else 404)."""
    return compare_loaded(store, load_runs(store, tenant, a, b), resamples)
