"""The claim verifier trained on a split's own contexts (no labels), applied to that split's recorded judgements.

For each split, `juiz synth` examples are built from the split's contexts alone and the verifier is trained on them;
then every recorded item's answer gets its least supported sentence's P(supported), and the default verdict is
formed twice from the recorded metric grades: as recorded, and with groundedness capped at 1 (a veto) where the
verifier's P(supported) is below the cut. No engine: the judge's grades are the ones `bench.judge_quality
--save-judgements` kept (bench/results/judgements). Develop on dev (the cuts swept there); the test split is
reported at the verifier's own cut (0.5), once.

    .venv/bin/python -m bench.verifier [--cuts 0.02,0.1,0.5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from scipy.stats import spearmanr
from sklearn.metrics import cohen_kappa_score, roc_auc_score

from bench.common import RESULTS, save, table
from juiz.judging.synthetic import Passage, build_examples
from juiz.judging.verifier import train

RUNS = {"dev": "dev_checks-8", "test": "test_checks-9"}
RANK = {"I": 0, "P": 1, "C": 2}
CORRECT = ("correct_terse", "correct_verbose")
FALSE = ("false_in_context", "false_not_in_context")


def _verdict(relevance: float, groundedness: float) -> str:
    """DEFAULT_VERDICT on the 0–3 grades: C when both ≥ 2.5, P when both ≥ 1.5, else I."""
    if relevance >= 2.5 and groundedness >= 2.5:
        return "C"
    return "P" if relevance >= 1.5 and groundedness >= 1.5 else "I"


def _figures(rows: list[tuple[str, str, str]]) -> dict[str, Any]:
    """rows: (category, manual label, verdict)."""
    labels = [RANK[m] for _, m, _ in rows]
    verdicts = [RANK[v] for _, _, v in rows]
    by: dict[str, list[str]] = defaultdict(list)
    for category, _, verdict in rows:
        by[category].append(verdict)

    def share(categories: tuple[str, ...], label: str) -> float:
        chosen = [v for c in categories for v in by[c]]
        return round(chosen.count(label) / len(chosen), 3) if chosen else float("nan")

    return {
        "n": len(rows),
        "accuracy": round(sum(a == b for a, b in zip(labels, verdicts, strict=True)) / len(rows), 3),
        "spearman": round(float(spearmanr(verdicts, labels)[0]), 3),
        "kappa_quadratic": round(float(cohen_kappa_score(labels, verdicts, weights="quadratic")), 3),
        "false_in_context_as_I": share(("false_in_context",), "I"),
        "false_not_in_context_as_I": share(("false_not_in_context",), "I"),
        "correct_as_C": share(CORRECT, "C"),
    }


def evaluate(split: str, cuts: list[float]) -> dict[str, Any]:
    with gzip.open(RESULTS / "judgements" / f"{RUNS[split]}.jsonl.gz", "rt") as recorded:
        judgements = [json.loads(line) for line in recorded]
    passages = [Passage(s["text"], s.get("source") or j["id"]) for j in judgements for s in j["context"] or []]
    started = time.perf_counter()
    examples = build_examples(passages, seed=0)
    verifier = train(examples)
    trained_s = time.perf_counter() - started
    support = {
        j["id"]: verifier.answer_support(j["answer"], [s["text"] for s in j["context"] or []]) for j in judgements
    }
    graded = [
        j
        for j in judgements
        if all(j["metrics"].get(m, {}).get("score") is not None for m in ("answer_relevance", "groundedness"))
    ]
    outcome: dict[str, Any] = {
        "run": RUNS[split],
        "examples": len(examples),
        "synth_and_train_s": round(trained_s, 1),
        "verifier": verifier.version,
        "weights": dict(zip(("bias", *verifier_features()), (verifier.bias, *verifier.weights), strict=True)),
    }
    scored = [(j["category"], support[j["id"]]) for j in graded if support[j["id"]] is not None]
    wanted = [(c, s) for c, s in scored if c in CORRECT + FALSE]
    outcome["auc_correct_vs_false"] = round(
        float(roc_auc_score([c in CORRECT for c, _ in wanted], [s for _, s in wanted])), 3
    )
    cells = {"judge": None, **{f"judge+verifier@{cut}": cut for cut in cuts}}
    outcome["cells"] = {}
    for name, cut in cells.items():
        rows = []
        for j in graded:
            relevance = j["metrics"]["answer_relevance"]["score"]
            groundedness = j["metrics"]["groundedness"]["score"]
            p = support[j["id"]]
            if cut is not None and p is not None and p < cut:
                groundedness = min(groundedness, 1)
            rows.append((j["category"], j["manual_label"], _verdict(relevance, groundedness)))
        outcome["cells"][name] = _figures(rows)
    return outcome


def verifier_features() -> tuple[str, ...]:
    from juiz.judging.verifier import FEATURES

    return FEATURES


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cuts", default="0.02,0.1,0.5", help="dev: the cuts swept (comma-separated)")
    args = parser.parse_args(argv)
    dev = evaluate("dev", [float(c) for c in args.cuts.split(",")])
    test = evaluate("test", [0.5])
    for split, outcome in (("dev", dev), ("test", test)):
        print(
            f"{split}: {outcome['examples']} synthetic examples, verifier AUC correct vs false "
            f"{outcome['auc_correct_vs_false']}"
        )
        print(cells_table(outcome["cells"]))
    return save("verifier", {"dev": dev, "test": test})


CELL_FIGURES = (
    "n",
    "accuracy",
    "spearman",
    "kappa_quadratic",
    "false_in_context_as_I",
    "false_not_in_context_as_I",
    "correct_as_C",
)


def cells_table(cells: dict[str, Any]) -> str:
    """The verdict figures of each cell (the judge alone, with a veto at each cut), one row a cell."""
    return table([[name, *(cell[k] for k in CELL_FIGURES)] for name, cell in cells.items()], ["cell", *CELL_FIGURES])


if __name__ == "__main__":
    main()
