"""Several sampled replies made one metric result (`options.samples: n`, drawn in the same engine call).

The replies give the result a spread: the mean and majority score, their standard deviation and the share of replies
agreeing with the majority (`SampleSummary`). The result's score is then the majority's (ties go to the lower score: a
judge that hesitates between 2 and 3 does not get the 3), its criteria and evidence come from a reply that gave that
score, and its expected score is the mean of the replies' expected scores. How much the replies disagree is one of
the reasons a result is marked uncertain (juiz.judging.uncertainty).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from schemas.judgement import MetricStatus
from schemas.uncertainty import SampleSummary


def combine_samples(samples: Sequence[dict[str, Any]], temperature: float) -> dict[str, Any]:
    """One metric result's fields from n parsed replies (each the fields one reply gives: see
    juiz.judging.metric_results.parsed_fields)."""
    scores: list[int | None] = [s.get("score") if s["status"] is MetricStatus.OK else None for s in samples]
    parsed = [score for score in scores if score is not None]
    if not parsed:  # no reply parsed: the first reply's failure stands, with the spread for the record
        return {
            **samples[0],
            "samples": SampleSummary(n=len(samples), temperature=temperature, scores=scores, majority_share=0.0),
        }
    counts = Counter(parsed)
    top = max(counts.values())
    majority = min(score for score, count in counts.items() if count == top)
    chosen = next(s for s, score in zip(samples, scores, strict=True) if score == majority)
    expected = [
        s["expected_score"] for s in samples if s["status"] is MetricStatus.OK and s.get("expected_score") is not None
    ]
    summary = SampleSummary(
        n=len(samples),
        temperature=temperature,
        scores=scores,
        mean=round(statistics.fmean(parsed), 6),
        majority=majority,
        std=round(statistics.pstdev(parsed), 6),
        majority_share=round(top / len(samples), 6),
    )
    return {
        **chosen,
        "score": majority,
        "normalized_score": round(majority / 3, 6),
        "expected_score": round(statistics.fmean(expected), 6) if expected else None,
        "samples": summary,
    }
