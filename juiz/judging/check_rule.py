"""How a check-based prompt's yes/no checks become a grade in the seeds' form (the prompt file's `[rule]`).

A check's value says how good the answer is by it: P(yes) / (P(yes) + P(no)) for a check phrased so that yes means good
(most of them), P(no) for one phrased the other way round (`yes_means = "bad"`: e.g. "does this sentence speak to a
grader?", which this judge reads far better than its positive twin). A check asked per sentence of the answer enters
as the minimum (or mean, as the rule says) over the sentences; one asked per point of the judge's own
reference, as the mean (or minimum) over the points, or (`weighted_by`) as the mean weighted by another per-point
check (rule-7: how much of the judge's reference the answer states, each point weighed by whether a complete answer
has to state it); a per-point check with a `words_weight` (rule-8) reads each point as that blend of the judge's
P(yes) and the share of the point's words the answer uses (juiz.judging.word_overlap). A per-sentence check may be
read against a `baseline`, the same question asked of the judge's own
reference points (`check_values`). Then, in order:

1. **Vetoes first.** `veto` checks are the minority flags that must be able to sink an answer on their own (refuses,
   only asks back, speaks to the grader): the weakest veto's value is the gate. Below `veto_below` the score is 0.
2. **Strength.** The mean value of the `core` checks, times the mean of the `scale` checks where the prompt has them
   (how much of the judge's own reference the answer states: a partial answer keeps its part of the core checks'
   value), capped by the gate: `strength = min(core mean × scale mean, gate)`. This is the expected score (0–1), so a
   vetoed answer also ranks low.
3. **Score.** 0–3: how many of the rule's three `cuts` the strength reaches (0 when vetoed).
4. **Expected score** (0–1). Rules before rule-6: the strength itself, which ranks answers but sits on its own scale
   (a C answer's strength may be 0.5). `expected = "banded"`: the strength placed between the cuts on the score's own
   scale (`banded`), so the expected score falls in the same class as the score under the default label mapping.

`info` checks are kept in the result and may feed a calibration; they never move the score. Checks the judge did not
answer yes or no to (low mass) or that failed are left out and named; when no core check, or a scale check, could not
be read at all, the metric is a parse error, never a made-up grade (the cuts were fitted on the product: without its
scale the strength would be read against cuts it was never fitted to).

The written text is built from the checks that decided the score, so it can never contradict it:
`Criteria:` what was checked, `Supporting Evidence:` each check's answer and probability, `Score: N`.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import prompts
from schemas.judgement import CheckResult, CheckStatus


@dataclass(frozen=True)
class RuleOutcome:
    ok: bool
    score: int | None
    expected_score: float | None
    criteria: str
    supporting_evidence: str
    error: str | None = None
    strength: float | None = None

    @property
    def text(self) -> str:
        """The grade in the seeds' form."""
        score = "" if self.score is None else str(self.score)
        return f"Criteria: {self.criteria}\nSupporting Evidence: {self.supporting_evidence}\nScore: {score}"


def veto_values(template: prompts.PromptTemplate, values: dict[str, float]) -> dict[str, float]:
    """The values of the veto checks that were read (`check_values`): the weakest is the rule's gate."""
    return {c.name: values[c.name] for c in template.checks if c.role == "veto" and c.name in values}


def veto_distance(template: prompts.PromptTemplate, results: Sequence[CheckResult]) -> tuple[str, float] | None:
    """The weakest read veto check and how far it sits from sinking the answer, in the judge's own probabilities
    (negative: it sinks it): its value − `veto_below`, or, read against a baseline, the margin − its gap below the
    baseline. None when the prompt has no veto or none was read."""
    assert template.rule is not None
    distances: dict[str, float] = {}
    for name, value in veto_values(template, check_values(template, results)).items():
        spec = _spec(template, name)
        gap = baseline_gap(template, results, spec) if spec.baseline else None
        if gap is not None:
            distances[name] = template.rule.baseline_margin - gap
        else:
            distances[name] = value - template.rule.veto_below
    return min(distances.items(), key=lambda kv: kv[1], default=None)


def _read(results: Sequence[CheckResult], name: str) -> list[CheckResult]:
    return [r for r in results if r.name == name and r.status is CheckStatus.OK and r.value is not None]


def read_value(spec: prompts.CheckSpec, result: CheckResult) -> float:
    """One read check's value as the rule uses it: for a check with a `words_weight`, its value blended with the
    share of the point's words the answer uses (juiz.judging.word_overlap.with_counted counts it into the result
    before the rule is applied); a point with no word to count is read by the judge alone."""
    assert result.value is not None
    if spec.words_weight is None or result.words is None:
        return result.value
    return (1.0 - spec.words_weight) * result.value + spec.words_weight * result.words


def _aggregate(values: Sequence[float], how: str) -> float:
    return min(values) if how == "min" else statistics.fmean(values)


def _weighted_mean(values: Sequence[float], read: Sequence[CheckResult], weights: Sequence[CheckResult]) -> float:
    """A per-point check's mean (`values`, one per `read` point) with each point weighed by another per-point check's
    P(yes) for the same point (a point whose weight was not read counts half); the plain mean when every weight is 0."""
    weight = {w.target: w.p_yes for w in weights if w.p_yes is not None}
    each = [weight.get(r.target, 0.5) for r in read]
    if sum(each) <= 0:
        return statistics.fmean(values)
    return sum(w * v for w, v in zip(each, values, strict=True)) / sum(each)


def aggregated(
    template: prompts.PromptTemplate, results: Sequence[CheckResult], spec: prompts.CheckSpec
) -> float | None:
    """One check's value over its sentences or points as the rule aggregates them (weighted where the check says),
    before any baseline; None when it was never read."""
    assert template.rule is not None
    read = _read(results, spec.name)
    if not read:
        return None
    values = [read_value(spec, r) for r in read]
    if spec.ask == "per_sentence":
        return _aggregate(values, spec.aggregate or template.rule.sentence_aggregate)
    if spec.ask == "per_point":
        if spec.weighted_by is not None:
            return _weighted_mean(values, read, _read(results, spec.weighted_by))
        return _aggregate(values, _point_aggregate(template, spec))
    return values[0]


def _point_aggregate(template: prompts.PromptTemplate, spec: prompts.CheckSpec) -> str:
    """How a per-point check is aggregated: as the sentences it is the baseline of, else by the rule's points."""
    assert template.rule is not None
    if any(c.baseline == spec.name for c in template.checks):
        return template.rule.sentence_aggregate
    return template.rule.point_aggregate


def baseline_value(
    template: prompts.PromptTemplate, results: Sequence[CheckResult], spec: prompts.CheckSpec
) -> float | None:
    """The baseline of a check read against one (CheckSpec.baseline): the same question asked of the judge's own
    reference points, aggregated as the check's sentences are (the weakest point against the weakest sentence)."""
    assert spec.baseline is not None
    return aggregated(template, results, _spec(template, spec.baseline))


def baseline_gap(
    template: prompts.PromptTemplate, results: Sequence[CheckResult], spec: prompts.CheckSpec
) -> float | None:
    """How much worse than its baseline a check reads the answer (baseline − value); None without a baseline read."""
    base, own = baseline_value(template, results, spec), aggregated(template, results, spec)
    return None if base is None or own is None else base - own


def check_values(template: prompts.PromptTemplate, results: Sequence[CheckResult]) -> dict[str, float]:
    """Each check's value (P(yes), or P(no) where yes means bad; per-sentence and per-point checks aggregated by the
    rule): only checks that were read.

    A check read against a baseline enters as `1 − (1 − veto_below) · (baseline − value) / margin`: 1 where its
    sentences read no worse than the judge's own reference points on the same item, under `veto_below` exactly where
    they fall more than the rule's margin below them. Why: this judge's yes/no probabilities shift with the language
    and the topic (Portuguese sentences written for the asker read ≈0.1 more "grader-directed" than English ones),
    while text aimed at a grader stands out from the judge's own answer to the same question. Scaled so that an answer
    the veto keeps is not capped near the top cut by it (`veto_below + margin − gap` would be a hidden second
    threshold for C). Without a baseline read, the check's own value stands."""
    assert template.rule is not None
    values: dict[str, float] = {}
    for spec in template.checks:
        value = aggregated(template, results, spec)
        if value is None:
            continue
        if spec.baseline is not None and (gap := baseline_gap(template, results, spec)) is not None:
            rule = template.rule
            value = min(1.0, max(0.0, 1.0 - (1.0 - rule.veto_below) * gap / rule.baseline_margin))
        values[spec.name] = value
    return values


def _word(value: float, yes_means: str = "good") -> str:
    """The judge's answer and its probability; for a check where yes means bad, P(yes) of the flag it raises."""
    if yes_means == "bad":
        return f"{'no' if value >= 0.5 else 'yes'} {1.0 - value:.2f}"
    return f"{'yes' if value >= 0.5 else 'no'} {value:.2f}"


def _shown(template: prompts.PromptTemplate, results: Sequence[CheckResult], name: str, value: float) -> str:
    """A check as the evidence shows it; a per-sentence (per-point) check with each sentence's (point's) P(yes). A
    check where yes means bad shows the judge's P(yes) of the flag, so the rule's min over values is its max."""
    each_target = [r.p_yes for r in results if r.name == name and r.status is CheckStatus.OK and r.target]
    spec = _spec(template, name)
    shown = f"{name} (yes = bad) {_word(value, 'bad')}" if spec.yes_means == "bad" else f"{name} {_word(value)}"
    if spec.ask not in ("per_sentence", "per_point") or len(each_target) < 2:
        return shown
    assert template.rule is not None
    each = ", ".join(f"{p:.2f}" for p in each_target if p is not None)
    per_point = spec.ask == "per_point"
    how: str = _point_aggregate(template, spec) if per_point else spec.aggregate or template.rule.sentence_aggregate
    what = "reference points" if per_point else "sentences"
    if spec.yes_means == "bad":
        how = {"min": "max", "mean": "mean"}[how]
    if spec.weighted_by is not None:
        how = f"mean weighted by {spec.weighted_by}"
    if spec.words_weight is not None:
        words = ", ".join(
            "–" if r.words is None else f"{r.words:.2f}"
            for r in results
            if r.name == name and r.status is CheckStatus.OK and r.target
        )
        each += f"; blended {spec.words_weight:.2f} with the share of each point's words the answer uses: {words}"
    return f"{shown} ({how} of {len(each_target)} {what}: {each})"


def _against_baseline(template: prompts.PromptTemplate, results: Sequence[CheckResult], spec: prompts.CheckSpec) -> str:
    """How far a check read against a baseline sits from it, in the judge's own terms (P(yes) of a flag)."""
    assert template.rule is not None and spec.baseline is not None
    exact = baseline_gap(template, results, spec)
    if exact is None:
        return f"{spec.name}: no baseline read, its own value stands"
    gap = round(exact, 2)  # how much worse than its baseline the check reads the answer (negative: better)
    worse, better = ("above", "below") if spec.yes_means == "bad" else ("below", "above")
    where = "level with" if gap == 0 else f"{abs(gap):.2f} {worse if gap > 0 else better}"
    return f"{spec.name} {where} {spec.baseline} (veto beyond {template.rule.baseline_margin:.2f})"


def _spec(template: prompts.PromptTemplate, name: str) -> prompts.CheckSpec:
    return next(c for c in template.checks if c.name == name)


def _veto_shown(template: prompts.PromptTemplate, results: Sequence[CheckResult], name: str, value: float) -> str:
    assert template.rule is not None
    spec = _spec(template, name)
    if spec.baseline is not None and (gap := baseline_gap(template, results, spec)) is not None:
        return f"{name} {gap:.2f} beyond {spec.baseline} > {template.rule.baseline_margin:.2f}"
    return f"{name} {value:.2f} < {template.rule.veto_below:.2f}"


def banded(strength: float, cuts: Sequence[float], veto_below: float | None = None) -> float:
    """The strength on the score's 0–1 scale: cut k (the first strength that scores k) maps to (k − ½)/3, halfway
    between the scores k − 1 and k as the default label mapping cuts them; linear in between, 0 → 0 and 1 → 1. A
    vetoed answer (score 0) stays below ½/3, in proportion to its strength under the veto's threshold."""
    if veto_below is not None:
        return (0.5 / 3) * min(strength / veto_below, 1.0)
    knots = [0.0, *cuts, 1.0]
    values = [0.0, 0.5 / 3, 1.5 / 3, 2.5 / 3, 1.0]
    for (x0, y0), (x1, y1) in itertools.pairwise(zip(knots, values, strict=True)):
        if strength <= x1:
            return y1 if x1 == x0 else y0 + (y1 - y0) * (strength - x0) / (x1 - x0)
    return 1.0


def _ungraded(criteria: str, evidence: str, error: str) -> RuleOutcome:
    """No grade: the checks the score needs could not be read (a parse error, never a made-up grade)."""
    return RuleOutcome(
        ok=False, score=None, expected_score=None, criteria=criteria, supporting_evidence=evidence, error=error
    )


def apply_rule(template: prompts.PromptTemplate, results: Sequence[CheckResult]) -> RuleOutcome:
    """The grade the rule gives these checks (see the module docstring)."""
    rule = template.rule
    assert rule is not None, "apply_rule needs a check-based prompt"
    values = check_values(template, results)
    vetoes = [c.name for c in template.checks if c.role == "veto"]
    core = [c.name for c in template.checks if c.role == "core"]
    scale = [c.name for c in template.checks if c.role == "scale"]
    unread = sorted({r.name for r in results if r.status is not CheckStatus.OK} - set(values))
    marked = any(c.yes_means == "bad" for c in template.checks)  # earlier versions' text stays as it was
    criteria = f"yes/no checks, yes = good{' unless marked' if marked else ''} ({rule.version}): " + ", ".join(
        c.name + (" (yes = bad)" if c.yes_means == "bad" else "") for c in template.checks
    )
    core_values = [values[name] for name in core if name in values]
    if not core_values:
        return _ungraded(
            criteria,
            "no core check could be read",
            f"no core check was answered yes or no (unread: {', '.join(unread) or 'all'})",
        )
    if unread_scale := [name for name in scale if name not in values]:
        return _ungraded(
            criteria,
            f"scale check not read: {', '.join(unread_scale)}",
            f"the scale check {', '.join(unread_scale)} could not be read (unread: {', '.join(unread)})",
        )
    gate_values = veto_values(template, values)
    gate = min(gate_values.values(), default=1.0)
    scaled = statistics.fmean(core_values) * statistics.fmean([values[name] for name in scale] or [1.0])
    strength = min(scaled, gate)
    vetoed_by = [name for name, value in gate_values.items() if value < rule.veto_below]
    score = 0 if vetoed_by else sum(strength >= cut for cut in rule.cuts)
    evidence = []
    if vetoed_by:
        evidence.append("vetoed: " + ", ".join(_veto_shown(template, results, n, gate_values[n]) for n in vetoed_by))
    # Checks the rule reads only through others (a baseline, a point's weight) are shown after the ones they serve.
    linked = [n for c in template.checks for n in (c.baseline, c.weighted_by) if n is not None]
    shown = [name for name in [*vetoes, *core, *scale, *linked] if name in values]
    evidence.append(
        "; ".join(
            _shown(template, results, name, aggregated(template, results, _spec(template, name)) or 0.0)
            for name in shown
        )
    )
    evidence += [_against_baseline(template, results, c) for c in template.checks if c.baseline and c.name in values]
    evidence.append(f"strength {strength:.2f} (cuts {', '.join(f'{c:.2f}' for c in rule.cuts)})")
    if unread:
        evidence.append(f"unread: {', '.join(unread)}")
    if rule.expected == "banded":
        expected = banded(strength, rule.cuts, rule.veto_below if vetoed_by else None)
    else:
        expected = strength
    return RuleOutcome(
        ok=True,
        score=score,
        expected_score=round(expected, 6),
        criteria=criteria,
        supporting_evidence="; ".join(evidence),
        strength=round(strength, 6),
    )
