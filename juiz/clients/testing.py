"""juiz in a team's own pytest suite: `assert_quality` fails a test when answer quality drops.

    from juiz.clients import JuizClient
    from juiz.clients.testing import assert_quality

    def test_rag_answers_stay_relevant(rag_pipeline):
        rows = [{"question": q, "context": ctx, "answer": rag_pipeline(q, ctx)} for q, ctx in EVAL_SET]
        with JuizClient("http://juiz:8000", api_key=KEY) as juiz:
            batch = juiz.submit(rows)
            juiz.wait(batch.id)
            assert_quality(juiz.results(batch.id), min_mean=0.7, max_share_below={2: 0.1})

The checks are those of `juiz check` (see juiz.agreement.gate); the AssertionError's message is the gate's summary,
naming every failed check with its figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from juiz.agreement.gate import GateReport, Thresholds, evaluate
from schemas import Judgement, LabelMapping


def assert_quality(
    results: Iterable[Judgement],
    *,
    min_mean: float | None = None,
    max_share_below: Mapping[int, float] | None = None,
    min_kappa: float | None = None,
    max_unscored: float = 0.0,
    label_mapping: LabelMapping | None = None,
) -> GateReport:
    """Raise AssertionError unless every given threshold holds; returns the report when they all do."""
    thresholds = Thresholds(
        min_mean=min_mean,
        max_share_below=tuple(sorted((max_share_below or {}).items())),
        min_kappa=min_kappa,
        max_unscored=max_unscored,
    )
    report = evaluate(results, thresholds, label_mapping)
    if not report.passed:
        raise AssertionError(report.summary())
    return report
