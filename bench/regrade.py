"""A design that only changes how recorded checks combine, graded from saved judgements: `bench.judge_quality`'s
figures without the engine.

A released prompt version that asks the very same conversations as the one a split was graded with (a new rule, new
cuts, a per-point blend with the answer's words: answer relevance checks-17 on checks-14's conversations) gives, item
by item, exactly the grade the engine would: the judge's replies are the same, and each metric's result is rebuilt
from them by the grading code itself (juiz.judging.metric_results.checks_result). The saved judgements are read,
every metric the target cell names is regraded under its version (in each item's language), the verdict is taken
again, and the rows are `bench.judge_quality`'s (`rag_rows`), printed beside the recorded cell's.

    .venv/bin/python -m bench.regrade JUDGEMENTS --cell checks-17 [--baseline checks-14] [--name NAME]

JUDGEMENTS is a `bench.judge_quality --save-judgements` file (bench/work/judgements/<split>_<cell>.jsonl, or a gzipped
copy in bench/results/judgements); the split is its name's first part. Refuses a target version whose conversations
differ from the recorded ones (other checks, reference or layout), since those would need the engine. Writes
bench/results/regrade_<split>_<cell>.json (or NAME.json).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import prompts
from bench.common import save, table
from bench.judge_quality import rag_rows
from bench.labelled import CELLS, Cell, labelled_set, read_judgements
from juiz.agreement.labels import with_default_verdict
from juiz.agreement.statistics import verdict_signal
from juiz.judging.checks import CheckJob
from juiz.judging.metric_results import checks_result
from schemas import Judgement, LabelMapping

SHOWN = ("accuracy", "kappa_quadratic", "spearman", "auc_expected_c_vs_rest", "refusal_injected_as_I",
         "false_in_context_as_I", "correct_as_C")  # fmt: skip


class DifferentConversations(ValueError):
    """The target version asks what the recorded one did not: only the engine can grade it."""


def same_conversations(recorded: prompts.PromptTemplate, target: prompts.PromptTemplate) -> bool:
    """Whether the two versions send the engine the same text: system messages, layouts, reference, each check's
    wording and worked examples (the rule, cuts, roles and how a check is read may differ; a check counted from the
    text is sent to no engine)."""

    def asked(t: prompts.PromptTemplate) -> tuple[object, ...]:
        checks = tuple((c.name, c.question, c.ask, c.user, c.system, c.examples, c.min_words, c.passages)
                       for c in t.checks if c.ask != "counted")  # fmt: skip
        return (t.system, t.user, t.reference, t.user_reference, t.system_reference, t.reference_max_tokens,
                t.reply_check, checks)  # fmt: skip

    return asked(recorded) == asked(target)


def regraded(judgement: Judgement, cell: Cell) -> Judgement:
    """The judgement with each of the cell's metrics rebuilt from its recorded checks under the cell's version."""
    metrics = dict(judgement.metrics or {})
    for metric, version in cell.versions.items():
        result = metrics.get(metric)
        if result is None or result.checks is None or result.provenance is None:
            raise ValueError(f"{judgement.id}: {metric} was not graded by checks")
        _, recorded_version, lang = prompts.parse_prompt_id(result.provenance.prompt)
        recorded = prompts.load(metric, recorded_version, lang or "en")
        target = prompts.load(metric, version, lang or "en")
        if not same_conversations(recorded, target):
            raise DifferentConversations(
                f"{metric}@{version} asks other conversations than {metric}@{recorded_version}"
            )
        provenance = result.provenance.model_copy(
            update={"prompt": f"{metric}@{version}.{target.lang}", "prompt_sha256": target.sha256}
        )
        job = CheckJob(
            item=0, metric=metric, template=target, fields={"question": judgement.question, "answer": judgement.answer}
        )
        checks = [c.model_copy(update={"words": None}) for c in result.checks]
        metrics[metric] = checks_result(job, checks, result.reference, result.latency_s or 0.0, provenance)
    return judgement.model_copy(update={"metrics": metrics})


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
    args = parser.parse_args(argv)
    split = args.judgements.name.split("_", 1)[0]
    triples = labelled_set(split, None)
    recorded = {j.id: j for j in read_judgements(args.judgements)}
    missing = [t.id for t in triples if t.id not in recorded]
    if missing:
        parser.error(f"{args.judgements.name} lacks {len(missing)} of the {split} split's items, e.g. {missing[0]}")
    before = [recorded[t.id] for t in triples]
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
        if r.get("signal", "score") == "score" and r["metric"] in ("verdict", "answer_relevance")
    ]
    print(table(printed, ["cell", "metric", *SHOWN]))
    label = verdict_signal(with_default_verdict(LabelMapping()))
    moved = sum(label(a) != label(b) for a, b in zip(after, before, strict=True))
    print(f"{moved} of {len(triples)} items change their automated label")
    report = {"judgements": args.judgements.name, "split": split, "baseline": source.name, "cell": args.cell}
    # The judge and engine are the recorded grading's (this run only re-reads its replies).
    first = next(iter((before[0].metrics or {}).values())).provenance
    report |= {"model": first.model if first else "?", "engine": first.engine if first else None, "items": len(triples)}
    save(args.name or f"regrade_{split}_{args.cell}", {**report, "moved": moved, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
