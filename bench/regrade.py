"""A design that only changes how recorded checks combine, graded from saved judgements: `bench.judge_quality`'s
figures without the engine.

A released prompt version that asks the very same conversations as the one a split was graded with, or a part of
them (a new rule, new cuts, a per-point blend with the answer's words: answer relevance checks-17 on checks-14's
conversations; relevance alone and completeness, the triad, on checks-19's) gives, item by item, exactly the grade
the engine would: the judge's replies are the same, and each metric's result is rebuilt
from them by the grading code itself (juiz.judging.metric_results.checks_result). The saved judgements are read,
every metric the target cell names is regraded under its version (in each item's language), the verdict is taken
again, and the rows are `bench.judge_quality`'s (`rag_rows`), printed beside the recorded cell's.

    .venv/bin/python -m bench.regrade JUDGEMENTS --cell checks-17 [--baseline checks-14] [--name NAME]

JUDGEMENTS is a `bench.judge_quality --save-judgements` file (bench/work/judgements/<split>_<cell>.jsonl, or a gzipped
copy in bench/results/judgements); the split is its name's first part. Refuses a target version that asks a conversation
the recorded one did not (other checks, reference or layout), since that would need the engine. Completeness, which
no grading records on its own, is read from answer relevance's conversations. Writes
bench/results/regrade_<split>_<cell>.json (or NAME.json).
"""

from __future__ import annotations

import argparse
import gzip
import time
from dataclasses import dataclass
from pathlib import Path

import prompts
from bench.common import save, table
from bench.judge_quality import rag_rows
from bench.labelled import CELLS, Cell, labelled_set, read_judgements
from juiz.agreement.compare import compare_items
from juiz.agreement.labels import with_default_verdict
from juiz.agreement.statistics import verdict_signal
from juiz.engines.base import JudgeEngine
from juiz.engines.models import DEFAULT_MODEL
from juiz.judging.backend import build_engine
from juiz.judging.checks import CHECK_REQUEST, Ask, CheckJob, read_check
from juiz.judging.judge import context_segments, shown_context
from juiz.judging.metric_results import checks_result
from juiz.runtime.settings import Settings
from schemas import BatchOptions, Judgement, LabelMapping, Triple
from schemas.judgement import MetricResult

SHOWN = ("accuracy", "kappa_quadratic", "spearman", "auc_expected_c_vs_rest", "refusal_injected_as_I",
         "false_in_context_as_I", "correct_as_C")  # fmt: skip


class DifferentConversations(ValueError):
    """The target version asks what the recorded one did not: only the engine can grade it."""


def _asked(t: prompts.PromptTemplate) -> tuple[tuple[object, ...], set[tuple[object, ...]]]:
    """What a version sends the engine: its shared text (system messages, layouts, reference) and each check's
    wording and worked examples (a check counted from the text is sent to no engine)."""
    shared = (t.system, t.user, t.reference, t.user_reference, t.system_reference, t.reference_max_tokens,
              t.reply_check)  # fmt: skip
    checks = {(c.name, c.question, c.ask, c.user, c.system, c.examples, c.min_words, c.passages)
              for c in t.checks if c.ask != "counted"}  # fmt: skip
    return shared, checks


def same_conversations(recorded: prompts.PromptTemplate, target: prompts.PromptTemplate) -> bool:
    """Whether the two versions send the engine the same text (the rule, cuts, roles and how a check is read may
    differ)."""
    return _asked(recorded) == _asked(target)


def asks_within(recorded: prompts.PromptTemplate, target: prompts.PromptTemplate) -> bool:
    """Whether every conversation the target version asks was asked by the recorded one: relevance alone and
    completeness each ask a part of answer relevance checks-19's."""
    return _holds(_asked(recorded), target)


def _holds(asked: tuple[tuple[object, ...], set[tuple[object, ...]]], target: prompts.PromptTemplate) -> bool:
    (shared, checks), (target_shared, target_checks) = asked, _asked(target)
    return shared == target_shared and target_checks <= checks


ASKED = "asked"  # a kept judgement's extra field: the prompt ids whose new checks `--ask` added to its grading


def asked_after(judgement: Judgement, metric: str, lang: str) -> list[prompts.PromptTemplate]:
    """The versions of this metric whose new checks were asked of the judgement's grading afterwards."""
    ids = (judgement.model_extra or {}).get(ASKED, [])
    return [prompts.load(metric, prompts.parse_prompt_id(i)[1], lang) for i in ids if i.startswith(f"{metric}@")]


@dataclass(frozen=True)
class Recorded:
    """One metric of a kept judgement as graded, and the versions it is read against: the one that graded it and
    those whose new checks were asked of it afterwards (`--ask`)."""

    result: MetricResult
    version: prompts.PromptTemplate
    after: list[prompts.PromptTemplate]

    @classmethod
    def of(cls, judgement: Judgement, metric: str) -> Recorded | None:
        result = (judgement.metrics or {}).get(metric)
        if result is None or result.checks is None or result.provenance is None:
            return None
        _, version, lang = prompts.parse_prompt_id(result.provenance.prompt)
        return cls(result, prompts.load(metric, version, lang or "en"), asked_after(judgement, metric, lang or "en"))

    def target(self, metric: str, version: str) -> prompts.PromptTemplate:
        """The cell's version of a metric read from this one's conversations, in the language it was graded in."""
        return prompts.load(metric, version, self.version.lang)

    def asked(self) -> tuple[tuple[object, ...], set[tuple[object, ...]]]:
        """The shared text and checks the grading holds: its version's, and the checks asked of it afterwards by
        versions sharing that text."""
        shared, checks = _asked(self.version)
        for later in self.after:
            later_shared, later_checks = _asked(later)
            if later_shared == shared:
                checks |= later_checks
        return shared, checks

    def holds(self, target: prompts.PromptTemplate) -> bool:
        """Whether every conversation the target asks is among those recorded."""
        return _holds(self.asked(), target)


def new_check_asks(judgements: list[Judgement], cell: Cell) -> list[tuple[int, str, Ask]]:
    """The conversations the cell's versions ask that the judgements' grading did not, as the judge renders them: the
    item's language, the context as shown, the kept reference's points; each with its item's index and metric. Only
    new checks: a version asking other shared text (system message, layout, reference) can't be completed this way."""
    pending: list[tuple[int, str, Ask]] = []
    for n, judgement in enumerate(judgements):
        for metric, version in cell.versions.items():
            recorded = Recorded.of(judgement, metric)
            if recorded is None:
                continue
            target = recorded.target(metric, version)
            shared, have = recorded.asked()
            if _asked(target)[0] != shared:
                raise DifferentConversations(f"{metric}@{version} asks other shared text than {recorded.version.id}")
            new = {c.name for c in target.checks if c.ask != "counted"} - {key[0] for key in have}
            if not new:
                continue
            segments = context_segments(judgement.context)
            triple = Triple(id=judgement.id, question=judgement.question, answer=judgement.answer)
            fields = {"question": judgement.question, "answer": judgement.answer,
                      "context": shown_context(triple, segments, BatchOptions().context_chars)}  # fmt: skip
            job = CheckJob.plan(n, metric, target, fields, segments)
            pending += [(n, metric, a) for a in job.asks(recorded.result.reference)[0] if a.check.name in new]
    return pending


def ask_new_checks(judgements: list[Judgement], cell: Cell, engine: JudgeEngine) -> tuple[list[Judgement], int]:
    """The judgements with the checks `new_check_asks` finds asked of the engine in one call (the engine that graded
    the kept file, for the figures to hold), each marked with the versions whose checks it now holds; and how many
    checks were asked."""
    pending = new_check_asks(judgements, cell)
    replies = engine.generate([a.conversation for _, _, a in pending], CHECK_REQUEST) if pending else []
    out = [j.model_copy(deep=True) for j in judgements]
    for (n, metric, ask), reply in zip(pending, replies, strict=True):
        result = (out[n].metrics or {})[metric]
        assert result.checks is not None
        result.checks.append(read_check(ask, reply))
    for n, metric in dict.fromkeys((n, metric) for n, metric, _ in pending):
        asked = (out[n].model_extra or {}).get(ASKED, [])
        setattr(out[n], ASKED, sorted({*asked, f"{metric}@{cell.versions[metric]}"}))
    return out, len(pending)


# A metric no grading recorded, read from the one whose conversations hold it.
READ_FROM = {"completeness": "answer_relevance"}


def regraded(judgement: Judgement, cell: Cell) -> Judgement:
    """The judgement with each of the cell's metrics rebuilt from its recorded checks under the cell's version."""
    recorded_metrics = dict(judgement.metrics or {})
    metrics = dict(recorded_metrics)
    for metric, version in cell.versions.items():
        source = metric if metric in recorded_metrics else READ_FROM.get(metric, metric)
        recorded = Recorded.of(judgement, source)
        if recorded is None:
            raise ValueError(f"{judgement.id}: {source} was not graded by checks")
        result, target = recorded.result, recorded.target(metric, version)
        if not recorded.holds(target):
            raise DifferentConversations(f"{metric}@{version} asks what {recorded.version.id} did not")
        assert result.provenance is not None and result.checks is not None  # as Recorded.of found them
        provenance = result.provenance.model_copy(
            update={"prompt": f"{metric}@{version}.{target.lang}", "prompt_sha256": target.sha256}
        )
        job = CheckJob(
            item=0, metric=metric, template=target, fields={"question": judgement.question, "answer": judgement.answer}
        )
        named = {spec.name for spec in target.checks}
        checks = [c.model_copy(update={"words": None}) for c in result.checks if c.name in named]
        metrics[metric] = checks_result(job, checks, result.reference, result.latency_s or 0.0, provenance)
    return judgement.model_copy(update={"metrics": metrics})


PAIRED = ("accuracy", "cohen_kappa_quadratic", "spearman_rho")
RESAMPLES = 2000


def paired(before: list[Judgement], after: list[Judgement], resamples: int = RESAMPLES) -> dict[str, dict[str, object]]:
    """Whether the target cell's item labels agree better than the baseline's, as `juiz compare` says it: each
    statistic's difference on the same items with a paired bootstrap interval, and McNemar's test of right labels."""
    indexed = list(enumerate(before)), list(enumerate(after))
    report, _ = compare_items("baseline", indexed[0], "cell", indexed[1], LabelMapping(), resamples=resamples)
    out: dict[str, dict[str, object]] = {}
    for name in PAIRED:
        difference = report.differences[name]
        interval = difference.ci95
        out[name] = {
            "a": _rounded(difference.a),
            "b": _rounded(difference.b),
            "difference": _rounded(difference.difference),
            "ci95": None if interval is None else [_rounded(interval.low), _rounded(interval.high)],
        }
    test = report.mcnemar
    out["mcnemar"] = {"only_baseline_right": test.only_a_right, "only_cell_right": test.only_b_right,
                      "p_value": round(test.p_value, 3)}  # fmt: skip
    return out


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def recorded_cell(judgement: Judgement) -> Cell:
    """The cell whose versions graded this judgement's metrics."""
    versions = {
        name: prompts.parse_prompt_id(m.provenance.prompt)[1]
        for name, m in (judgement.metrics or {}).items()
        if m.provenance is not None
    }
    return next(c for c in CELLS.values() if c.versions == versions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("judgements", type=Path)
    parser.add_argument("--cell", required=True, choices=sorted(CELLS))
    parser.add_argument(
        "--baseline", choices=sorted(CELLS), help="the cell to print beside it (default: the one that graded the file)"
    )
    parser.add_argument("--name", default=None, help="the results file's name (bench/results/NAME.json)")
    parser.add_argument(
        "--ask",
        action="store_true",
        help="ask the judge engine the checks the cell's versions add to the kept grading first, and keep the grading "
        "with them as JUDGEMENTS' name + '+CELL' (run it under the engine lock)",
    )
    parser.add_argument("--engine", default="auto", choices=("auto", "vllm", "llamacpp"), help="the engine --ask uses")
    args = parser.parse_args(argv)
    split = args.judgements.name.split("_", 1)[0]
    triples = labelled_set(split, None)
    recorded = {j.id: j for j in read_judgements(args.judgements)}
    missing = [t.id for t in triples if t.id not in recorded]
    if missing:
        parser.error(f"{args.judgements.name} lacks {len(missing)} of the {split} split's items, e.g. {missing[0]}")
    before = [recorded[t.id] for t in triples]
    if args.ask:
        engine = build_engine(Settings.from_env(None, model=DEFAULT_MODEL, engine=args.engine), say=print)
        try:
            began = time.perf_counter()
            before, asked = ask_new_checks(before, CELLS[args.cell], engine)
            seconds = round(time.perf_counter() - began, 1)
        finally:
            engine.close()
        kept = args.judgements.with_name(args.judgements.name.split(".")[0] + f"+{args.cell}.jsonl.gz")
        lines = "".join(j.model_dump_json() + "\n" for j in before)
        kept.write_bytes(gzip.compress(lines.encode("utf-8"), mtime=0))
        print(f"asked {asked} checks in {seconds} s on {dict(engine.origin) or 'vllm'} -> {kept}")
    try:
        after = [regraded(j, CELLS[args.cell]) for j in before]
    except DifferentConversations as exc:
        parser.error(str(exc))
    source = recorded_cell(before[0])
    if args.baseline is not None and args.baseline != source.name:
        source = CELLS[args.baseline]
        before = [regraded(j, source) for j in before]
    rows = [*rag_rows(source, triples, before, 0.0), *rag_rows(CELLS[args.cell], triples, after, 0.0)]
    printed = [
        [r["cell"], r["metric"], *(r.get(k) for k in SHOWN)]
        for r in rows
        if r.get("signal", "score") == "score" and r["metric"] in ("verdict", "answer_relevance", "completeness")
    ]
    print(table(printed, ["cell", "metric", *SHOWN]))
    label_after = verdict_signal(with_default_verdict(LabelMapping(), CELLS[args.cell].versions))
    label_before = verdict_signal(with_default_verdict(LabelMapping(), source.versions))
    moved = sum(label_after(a) != label_before(b) for a, b in zip(after, before, strict=True))
    print(f"{moved} of {len(triples)} items change their automated label")
    compared = paired(before, after)
    print(table(
        [[name, *(compared[name].get(k) for k in ("a", "b", "difference", "ci95"))] for name in PAIRED],
        ["item label", source.name, args.cell, "difference", "95% paired bootstrap"],
    ))  # fmt: skip
    print(f"McNemar (right labels): {compared['mcnemar']}")
    report = {"judgements": args.judgements.name, "split": split, "baseline": source.name, "cell": args.cell}
    # The judge and engine are the recorded grading's (this run only re-reads its replies).
    first = next(iter((before[0].metrics or {}).values())).provenance
    report |= {"model": first.model if first else "?", "engine": first.engine if first else None, "items": len(triples)}
    save(args.name or f"regrade_{split}_{args.cell}", {**report, "moved": moved, "paired": compared, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
