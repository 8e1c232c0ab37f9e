"""bench.rule_fit recombines a committed grading's checks under a cell's rules: checks-8's reproduce the figures its
dev run recorded, and checks-9 reads the same checks with the least supported sentence deciding groundedness."""

from __future__ import annotations

import json

import numpy as np
import pytest

import prompts
from bench.common import RESULTS
from bench.rule_fit import measure, recorded

DEV_GRADING = RESULTS / "judgements" / "dev_checks-8.jsonl.gz"


def released_cuts(cell_groundedness: str) -> dict[str, tuple[float, ...]]:
    cuts = {}
    for metric, version in (("answer_relevance", "checks-8"), ("groundedness", cell_groundedness)):
        rule = prompts.load(metric, version, "en").rule
        assert rule is not None
        cuts[metric] = rule.cuts
    return cuts


def test_the_committed_dev_grading_reproduces_the_recorded_dev_figures() -> None:
    run = recorded(DEV_GRADING, "checks-8")
    assert len(run["y"]) == 129
    figures = measure(run, released_cuts("checks-4"))["verdict"]
    recorded_rows = json.loads((RESULTS / "judge_quality_dev_checks-8.json").read_text(encoding="utf-8"))["rows"]
    [verdict] = [r for r in recorded_rows if r["metric"] == "verdict" and r["signal"] == "score"]
    assert figures["spearman"] == pytest.approx(verdict["spearman"], abs=0.001)
    assert figures["kappa_quadratic"] == pytest.approx(verdict["kappa_quadratic"], abs=0.001)


def test_checks_9_reads_groundedness_by_its_least_supported_sentence() -> None:
    mean_read, min_read = recorded(DEV_GRADING, "checks-8"), recorded(DEV_GRADING, "checks-9")
    mean_strength, min_strength = mean_read["groundedness"][0], min_read["groundedness"][0]
    assert np.all(min_strength <= mean_strength + 1e-9)
    assert np.any(min_strength < mean_strength - 0.1)  # answers with one sentence the context does not state
    np.testing.assert_array_equal(mean_read["answer_relevance"][0], min_read["answer_relevance"][0])
