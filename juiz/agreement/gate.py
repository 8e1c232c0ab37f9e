"""A quality gate for CI: thresholds on graded results, a summary, a JUnit XML report.

    juiz check INPUT --min-mean 0.7 --max-share-below 2:0.1 [--min-kappa 0.5] [--server URL] [--junit FILE]

Checks (each one a JUnit test case, so CI shows which one failed):
- `min_mean`: mean normalised score (0–1) of the graded items is at least this;
- `max_share_below K:S`: at most a share S of the graded items scored below K (0–3); repeatable;
- `min_kappa`: Cohen's κ between judge and manual labels is at least this (items without a label are left out;
  a κ that is undefined, e.g. no labels, fails the check with the reason);
- `max_unscored`: at most this share of the items has no score (`failed` or `parse_error`; default 0: a judge that
  could not grade is a red build, not a silent pass).

Shares and means are over *graded* items; the unscored ones are counted by `max_unscored`.
`juiz.clients.testing.assert_quality` runs the same checks inside a team's own pytest suite.
"""

from __future__ import annotations

import statistics
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from juiz.runtime.errors import InputError
from schemas import Judgement, JudgementStatus, LabelMapping


@dataclass(frozen=True)
class Thresholds:
    min_mean: float | None = None
    max_share_below: tuple[tuple[int, float], ...] = ()
    min_kappa: float | None = None
    max_unscored: float = 0.0

    def __post_init__(self) -> None:
        if self.min_mean is not None and not 0.0 <= self.min_mean <= 1.0:
            raise InputError("must be between 0 and 1 (normalised scores)", source="--min-mean")
        for score, share in self.max_share_below:
            if not 1 <= score <= 3 or not 0.0 <= share <= 1.0:
                raise InputError(
                    "expected SCORE:SHARE with SCORE 1-3 and SHARE 0-1, e.g. 2:0.1", source="--max-share-below"
                )
        if self.min_kappa is not None and not -1.0 <= self.min_kappa <= 1.0:
            raise InputError("must be between -1 and 1", source="--min-kappa")
        if not 0.0 <= self.max_unscored <= 1.0:
            raise InputError("must be a share between 0 and 1", source="--max-unscored")


def parse_share_below(text: str) -> tuple[int, float]:
    """`2:0.1` → (2, 0.1): at most 10% of graded items below score 2."""
    score, sep, share = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(score), float(share)
    except ValueError:
        raise InputError(f"{text!r} is not SCORE:SHARE, e.g. 2:0.1", source="--max-share-below") from None


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    value: float | None
    threshold: str
    detail: str

    def line(self) -> str:
        shown = "n/a" if self.value is None else f"{self.value:.3f}"
        return (
            f"{'PASS' if self.passed else 'FAIL'}  {self.name:<22} {shown:>7}  (needs {self.threshold}) {self.detail}"
        )


@dataclass(frozen=True)
class GateReport:
    total: int
    graded: int
    mean: float | None
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def summary(self) -> str:
        mean = "n/a" if self.mean is None else f"{self.mean:.3f}"
        head = f"juiz check: {self.graded}/{self.total} items graded, mean normalised score {mean}"
        verdict = "PASSED" if self.passed else f"FAILED ({sum(not c.passed for c in self.checks)} check(s))"
        return "\n".join([head, *(c.line() for c in self.checks), verdict])


def evaluate(
    judgements: Iterable[Judgement], thresholds: Thresholds, mapping: LabelMapping | None = None
) -> GateReport:
    """Every configured check over the results."""
    results = list(judgements)
    if not results:
        raise InputError("no results to check")
    graded = [j for j in results if j.status == JudgementStatus.OK and j.score is not None]
    scores = [j.score for j in graded if j.score is not None]
    normalised = [j.normalized_score for j in graded if j.normalized_score is not None]
    mean = statistics.fmean(normalised) if normalised else None
    checks: list[Check] = []
    unscored = (len(results) - len(graded)) / len(results)
    checks.append(
        Check(
            "max_unscored",
            unscored <= thresholds.max_unscored,
            unscored,
            f"<= {thresholds.max_unscored:g}",
            f"{len(results) - len(graded)} of {len(results)} items without a score",
        )
    )
    if thresholds.min_mean is not None:
        passed = mean is not None and mean >= thresholds.min_mean
        checks.append(Check("min_mean", passed, mean, f">= {thresholds.min_mean:g}", f"over {len(normalised)} items"))
    for below, max_share in thresholds.max_share_below:
        count = sum(score < below for score in scores)
        share = count / len(scores) if scores else None
        passed = share is not None and share <= max_share
        detail = f"{count} of {len(scores)} graded items score below {below}"
        checks.append(Check(f"max_share_below_{below}", passed, share, f"<= {max_share:g}", detail))
    if thresholds.min_kappa is not None:
        checks.append(_kappa_check(results, thresholds.min_kappa, mapping or LabelMapping()))
    return GateReport(total=len(results), graded=len(graded), mean=mean, checks=checks)


def _kappa_check(results: Sequence[Judgement], min_kappa: float, mapping: LabelMapping) -> Check:
    from juiz.agreement.statistics import compute_agreement

    report = compute_agreement(results, mapping, resamples=0)
    kappa = report.cohen_kappa.value
    passed = kappa is not None and kappa >= min_kappa
    detail = f"over {report.n} labelled items" if kappa is not None else f"undefined: {report.cohen_kappa.reason}"
    return Check("min_kappa", passed, kappa, f">= {min_kappa:g}", detail)


def write_junit(report: GateReport, path: Path, *, suite: str = "juiz.check") -> None:
    """JUnit XML: one test case per check; a failed check is a <failure> with its figures."""
    failures = sum(not c.passed for c in report.checks)
    root = ET.Element("testsuites", name="juiz", tests=str(len(report.checks)), failures=str(failures))
    testsuite = ET.SubElement(
        root, "testsuite", name=suite, tests=str(len(report.checks)), failures=str(failures), errors="0", skipped="0"
    )
    properties = ET.SubElement(testsuite, "properties")
    for name, value in (("items", report.total), ("graded", report.graded), ("mean_normalized_score", report.mean)):
        ET.SubElement(properties, "property", name=name, value="" if value is None else str(value))
    for check in report.checks:
        case = ET.SubElement(testsuite, "testcase", classname=suite, name=check.name)
        if not check.passed:
            failure = ET.SubElement(case, "failure", message=f"{check.name}: {check.value} (needs {check.threshold})")
            failure.text = check.line()
        ET.SubElement(case, "system-out").text = check.line()
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
