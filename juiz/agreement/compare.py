"""Compare runs over the items they share (a new prompt, judge model or retriever against the old one).

Items are paired by id, or by the triple's content key (`schemas.triple.content_key`) when the runs share no id. A
label belongs to the triple: when both runs graded the same triple, run a's label (else run b's) is the reference for
both; when the runs' answers to a question differ, each keeps its own. Each run's agreement is computed on the shared
items; the differences, McNemar's test and the fixed / regressed lists on the items both runs can compare (a label and
a verdict in each), so a figure there is about exactly the same items.

The verdict is the judge's class the agreement compares (the main metric's score through the label mapping).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from juiz.agreement.differences import paired_differences, paired_items
from juiz.agreement.labels import class_of_label, label_for, resolve_numeric_scale
from juiz.agreement.mcnemar import mcnemar
from juiz.agreement.ppi import estimate_share_difference
from juiz.agreement.statistics import TITLES, Signal, compute_agreement, text_table, top_level_signal
from juiz.runtime.errors import InputError
from schemas.agreement import Shares
from schemas.compare import ComparedItem, CompareReport, ExperimentReport, Movement, RunSummary
from schemas.judgement import Judgement, JudgementStatus
from schemas.labels import LabelMapping

DELTAS = tuple(range(-3, 4))
Match = Literal["auto", "id", "content"]
Run = tuple[str, Sequence[tuple[int, Judgement]]]  # (run id, (input index, judgement) per item)


def require_graded(run_id: str, judgements: Sequence[Judgement]) -> None:
    """A run without one ok grade has nothing to compare: InputError naming the run."""
    if not any(j.status is JudgementStatus.OK for j in judgements):
        raise InputError(
            f"nothing graded ({len(judgements)} items, none ok): a run needs graded items to be compared",
            source=run_id,
        )


def _has_content(judgement: Judgement) -> bool:
    """Whether the judgement carries its triple (results read for the page hold only what agreement reads)."""
    return "question" in judgement.model_fields_set


def _first_by(
    judgements: Sequence[tuple[int, Judgement]], key: Callable[[Judgement], str]
) -> dict[str, tuple[int, Judgement]]:
    """(input index, judgement) per key; a repeated key keeps its first item."""
    out: dict[str, tuple[int, Judgement]] = {}
    for index, judgement in judgements:
        out.setdefault(key(judgement), (index, judgement))
    return out


def _matching(
    a: Sequence[tuple[int, Judgement]], b: Sequence[tuple[int, Judgement]], match: Match
) -> Literal["id", "content"]:
    """id or content: `auto` pairs by id when the runs share one, else by content when every item carries it."""
    with_content = all(_has_content(j) for _, j in (*a, *b))
    if match == "content" and not with_content:
        raise InputError("pairing by content needs every item's question, answer and context", field="match")
    if match != "auto":
        return match
    ids = {j.id for _, j in a}
    if any(j.id in ids for _, j in b) or not with_content:
        return "id"
    return "content"


def _labels(ja: Judgement, jb: Judgement) -> tuple[Judgement, Judgement]:
    """Both with their reference label: the triple's (a's, else b's) when it is the same triple, else their own."""
    same = not (_has_content(ja) and _has_content(jb)) or ja.content_key() == jb.content_key()
    if not same:
        return ja, jb
    label = ja.manual_label if ja.manual_label is not None else jb.manual_label
    return ja.model_copy(update={"manual_label": label}), jb.model_copy(update={"manual_label": label})


def _movement(judge_a: int, judge_b: int, label_a: int, label_b: int) -> Movement:
    before, after = abs(judge_a - label_a), abs(judge_b - label_b)
    if after < before:
        return "fixed"
    if after > before:
        return "regressed"
    return "sideways" if judge_a != judge_b and label_a == label_b else "unchanged"


def _verdicts(
    left: Sequence[Judgement], right: Sequence[Judgement], mapping: LabelMapping, read: Signal
) -> tuple[dict[str, Movement], list[bool], list[bool]]:
    """Over paired items: each one's movement, and whether each run's verdict is the label's class."""
    scale = resolve_numeric_scale([j.manual_label for j in (*left, *right)], mapping)
    movements: dict[str, Movement] = {}
    right_a: list[bool] = []
    right_b: list[bool] = []
    for ja, jb in zip(left, right, strict=True):
        value_a, value_b = read(ja), read(jb)
        assert value_a is not None and value_b is not None and ja.manual_label is not None  # paired_items kept these
        assert jb.manual_label is not None
        label_a = class_of_label(ja.manual_label, mapping, scale)
        label_b = class_of_label(jb.manual_label, mapping, scale)
        movements[ja.id] = _movement(value_a[0], value_b[0], label_a, label_b)
        right_a.append(value_a[0] == label_a)
        right_b.append(value_b[0] == label_b)
    return movements, right_a, right_b


def compare_items(
    a_id: str,
    a: Sequence[tuple[int, Judgement]],
    b_id: str,
    b: Sequence[tuple[int, Judgement]],
    mapping: LabelMapping,
    *,
    resamples: int,
    seed: int = 0,
    match: Match = "auto",
    shares: bool = False,
    reference: str = "manual_label",
) -> tuple[CompareReport, list[ComparedItem]]:
    """Run b against run a, and every shared item (the report lists the changed ones only). `a` and `b` are (input
    index, judgement) pairs; `mapping` (run a's) names the classes of both and reads each result's judge class from
    its grades. `shares` adds the prediction-powered change of each class's share (b − a). `reference` names where
    the manual labels come from. Raises InputError when either run has nothing graded."""
    require_graded(a_id, [j for _, j in a])
    require_graded(b_id, [j for _, j in b])
    read = top_level_signal(mapping)
    matched_by = _matching(a, b, match)
    key: Callable[[Judgement], str] = (lambda j: j.id) if matched_by == "id" else (lambda j: j.content_key())
    by_a, by_b = _first_by(a, key), _first_by(b, key)
    shared = [k for k in by_a if k in by_b]
    left: list[Judgement] = []
    right: list[Judgement] = []
    items: list[ComparedItem] = []
    deltas = {str(d): 0 for d in DELTAS} | {"missing": 0}
    for item_key in shared:
        (index_a, raw_a), (index_b, raw_b) = by_a[item_key], by_b[item_key]
        ja, jb = _labels(raw_a, raw_b)
        left.append(ja)
        right.append(jb)
        delta = None if ja.score is None or jb.score is None else jb.score - ja.score
        deltas["missing" if delta is None else str(delta)] += 1
        items.append(
            ComparedItem(
                id=ja.id,
                index_a=index_a,
                index_b=index_b,
                manual_label=ja.manual_label if ja.manual_label is not None else jb.manual_label,
                manual_label_b=jb.manual_label if jb.manual_label != ja.manual_label else None,
                score_a=ja.score,
                score_b=jb.score,
                delta=delta,
                label_a=label_for(ja, mapping),
                label_b=label_for(jb, mapping),
            )
        )
    paired_a, paired_b = paired_items(left, right, read)
    movements, right_a, right_b = _verdicts(paired_a, paired_b, mapping, read)
    for item in items:
        item.movement = movements.get(item.id)
    agreement_a = compute_agreement(left, mapping, resamples=resamples, seed=seed)
    agreement_b = compute_agreement(right, mapping, resamples=resamples, seed=seed)
    agreement_a.reference = agreement_b.reference = reference
    difference: Shares | None = None
    if shares:
        difference = estimate_share_difference(left, right, mapping, reference=reference)
    report = CompareReport(
        a=a_id,
        b=b_id,
        matched_by=matched_by,
        shared=len(shared),
        only_a=len(by_a) - len(shared),
        only_b=len(by_b) - len(shared),
        agreement_a=agreement_a,
        agreement_b=agreement_b,
        paired=len(paired_a),
        differences=paired_differences(paired_a, paired_b, mapping, read, resamples=resamples, seed=seed),
        mcnemar=mcnemar(right_a, right_b),
        **{
            kind: [i for i, m in movements.items() if m == kind]
            for kind in ("fixed", "regressed", "unchanged", "sideways")
        },
        shares_difference=difference,
        score_deltas=deltas,
        changed=[i for i in items if i.label_a != i.label_b],
    )
    return report, items


def compare_experiment(
    runs: Sequence[Run],
    mapping: LabelMapping,
    *,
    resamples: int,
    seed: int = 0,
    match: Match = "auto",
    shares: bool = False,
    reference: str = "manual_label",
) -> ExperimentReport:
    """Two runs or more on the same items: each later run against the first (the baseline), pairwise."""
    if len(runs) < 2:
        raise InputError(f"comparing needs two runs or more, got {len(runs)}", field="runs")
    for run_id, items in runs:
        require_graded(run_id, [j for _, j in items])
    (baseline_id, baseline), *others = runs
    return ExperimentReport(
        baseline=baseline_id,
        runs=[
            RunSummary(id=run_id, items=len(items), graded=sum(1 for _, j in items if j.status is JudgementStatus.OK))
            for run_id, items in runs
        ],
        comparisons=[
            compare_items(
                baseline_id,
                baseline,
                run_id,
                items,
                mapping,
                resamples=resamples,
                seed=seed,
                match=match,
                shares=shares,
                reference=reference,
            )[0]
            for run_id, items in others
        ],
    )


def _number(value: float | None, sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.3f}" if sign else f"{value:.3f}"


def format_shares(shares: Shares) -> list[str]:
    """The prediction-powered shares (or share differences) as a small table."""
    what = "each class's share, run b − run a" if shares.of == "difference" else "each class's share of the answers"
    counted = "questions labelled in both runs" if shares.of == "difference" else "labelled items"
    lines = [
        f"{what} (prediction-powered: {shares.n_items} items, {shares.n_labelled} {counted}, "
        f"{shares.n_ungraded} without a judge class; labels: {shares.reference})"
    ]
    if shares.unavailable:
        return [*lines, f"  n/a ({shares.unavailable})"]
    sign = shares.of == "difference"
    rows = [["class", "estimate", "95% CI", "labels alone", "95% CI", "judge alone", "λ"]]
    for s in shares.shares:
        rows.append(
            [
                s.label,
                _number(s.estimate, sign),
                "n/a" if s.ci95 is None else f"[{_number(s.ci95.low, sign)}, {_number(s.ci95.high, sign)}]",
                _number(s.classical, sign),
                "n/a"
                if s.classical_ci95 is None
                else f"[{_number(s.classical_ci95.low, sign)}, {_number(s.classical_ci95.high, sign)}]",
                _number(s.judge_only, sign),
                _number(s.tuning),
            ]
        )
    return lines + text_table(rows)


def format_comparison(report: CompareReport, listed: int = 20) -> str:
    """One comparison as text: the pairing, each statistic a / b / b − a with its paired interval, McNemar's test,
    the verdicts' movements with the first `listed` ids of each, and the shares' change when computed."""
    lines = [
        f"{report.b} against {report.a}: {report.shared} shared items (paired by {report.matched_by}), "
        f"{report.only_a} only in {report.a}, {report.only_b} only in {report.b}",
        f"{report.paired} items with a label and a verdict in both runs; labels: {report.agreement_a.reference}",
        f"95% CI of b − a: paired percentile bootstrap, {report.agreement_a.bootstrap.resamples} resamples, "
        f"seed {report.agreement_a.bootstrap.seed}",
        "",
    ]
    rows = [["statistic", "a", "b", "b − a", "95% CI"]]
    for name, title in TITLES.items():
        diff = report.differences.get(name)
        if diff is None or diff.difference is None:
            rows.append([title, "n/a", "n/a", "n/a", f"({diff.reason if diff else 'not computed'})"])
            continue
        interval = "n/a" if diff.ci95 is None else f"[{diff.ci95.low:+.3f}, {diff.ci95.high:+.3f}]"
        rows.append([title, _number(diff.a), _number(diff.b), _number(diff.difference, True), interval])
    lines += text_table(rows)
    if report.mcnemar is not None:
        test = report.mcnemar
        lines += [
            "",
            f"McNemar ({test.method}): {test.only_a_right} items right only in a, {test.only_b_right} right only in b, "
            f"p = {test.p_value:.4g}",
        ]
    lines.append(
        f"verdicts against the label: {len(report.fixed)} fixed, {len(report.regressed)} regressed, "
        f"{len(report.unchanged)} unchanged, {len(report.sideways)} sideways"
    )
    for kind in ("fixed", "regressed", "sideways"):
        ids: list[str] = getattr(report, kind)
        if ids:
            more = f" … {len(ids) - listed} more (--json lists them all)" if len(ids) > listed else ""
            lines.append(f"  {kind}: {', '.join(ids[:listed])}{more}")
    if report.shares_difference is not None:
        lines += ["", *format_shares(report.shares_difference)]
    return "\n".join(lines)


def format_experiment(report: ExperimentReport) -> str:
    """Every run's size, then each comparison against the baseline."""
    lines = [f"baseline: {report.baseline}"]
    lines += [f"  {run.id}: {run.items} items, {run.graded} graded" for run in report.runs]
    for comparison in report.comparisons:
        lines += ["", format_comparison(comparison)]
    return "\n".join(lines)
