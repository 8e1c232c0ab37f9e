"""The labelled RAG set (bench/data/rag_<split>.jsonl) and the judge configurations graded on it: what
bench.judge_quality, bench.calibration_quality, bench.check_report and bench.rule_fit share."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import REPO, WORK
from juiz.formats.readers import read_triples
from schemas import BatchOptions, Judgement, Triple

log = logging.getLogger("bench.labelled")

DATA = REPO / "bench" / "data"
CLASSES = {"I": 0, "P": 1, "C": 2}


@dataclass(frozen=True)
class Cell:
    """One engine pass: a mode and a prompt version per metric, graded together as the product grades them."""

    name: str
    mode: str
    versions: dict[str, str]

    def options(self) -> BatchOptions:
        return BatchOptions.model_validate(
            {
                "metrics": list(self.versions),
                "mode": self.mode,
                "prompt": [f"{m}@{v}" for m, v in self.versions.items()],
            }
        )


# The grid that fits ~25 min on a 2-core CPU with the 1.5B judge: the candidate answer-relevance version with
# groundedness (→ the verdict) in both modes, the released juiz-1 beside it, context relevance per segment in fast
# mode (CoT per segment is `cr-cot`, opt-in: about one more CoT pass over every distinct question × segment).
CELLS = {
    "cot-v2": Cell("cot-v2", "cot", {"answer_relevance": "juiz-2", "groundedness": "juiz-1"}),
    "cot-v1": Cell("cot-v1", "cot", {"answer_relevance": "juiz-1"}),
    "fast-v2": Cell(
        "fast-v2", "fast", {"answer_relevance": "juiz-2", "groundedness": "juiz-1", "context_relevance": "juiz-1"}
    ),
    "fast-v1": Cell("fast-v1", "fast", {"answer_relevance": "juiz-1"}),
    "cr-cot": Cell("cr-cot", "cot", {"context_relevance": "juiz-1"}),
    # Issue 19: yes/no checks read from token probabilities (the mode does not apply to check-based prompts).
    "checks-1": Cell("checks-1", "fast", {"answer_relevance": "checks-1", "groundedness": "checks-1"}),
    # checks-2: both metrics share each item's prefix; the context is shown to every check.
    "checks-2": Cell("checks-2", "fast", {"answer_relevance": "checks-2", "groundedness": "checks-2"}),
    # checks-3: checks-2's checks with the rule's cuts fitted with every class weighted equally (bench.rule_fit).
    "checks-3": Cell("checks-3", "fast", {"answer_relevance": "checks-3", "groundedness": "checks-3"}),
    # checks-4: answer relevance adds a veto asked per sentence with worked examples (text for the grader).
    "checks-4": Cell("checks-4", "fast", {"answer_relevance": "checks-4", "groundedness": "checks-3"}),
    # checks-5: answer relevance adds "covers": each key point of the judge's own answer from the context, asked of
    # the answer in a short conversation with worked examples (complete vs partial answers).
    "checks-5": Cell("checks-5", "fast", {"answer_relevance": "checks-5", "groundedness": "checks-3"}),
    # checks-6: groundedness checks-4, each sentence of the answer asked beside the context segments it is about, in a
    # short conversation with worked examples (supported vs contradicted or made up); answer relevance checks-6 is
    # checks-5 with the expected score on the score's scale.
    "checks-6": Cell("checks-6", "fast", {"answer_relevance": "checks-6", "groundedness": "checks-4"}),
    # checks-7: answer relevance's per-sentence veto asked the other way round ("does this sentence speak to a
    # grader?", yes = bad), which this judge reads far better than checks-6's positive question.
    "checks-7": Cell("checks-7", "fast", {"answer_relevance": "checks-7", "groundedness": "checks-4"}),
    # checks-8: checks-7 with its grader veto read against the same question asked of the judge's own reference
    # points, and the key points weighted by whether a complete answer has to state them (rule-7).
    "checks-8": Cell("checks-8", "fast", {"answer_relevance": "checks-8", "groundedness": "checks-4"}),
    # checks-9: checks-8's conversations, groundedness checks-5: the least supported sentence decides (rule-8).
    "checks-9": Cell("checks-9", "fast", {"answer_relevance": "checks-8", "groundedness": "checks-5"}),
    # checks-10: checks-8's checks in one layout shared by both metrics and every check kind (one system message with
    # the worked examples, then the question and context, then what a conversation asks about): an item's prefix is
    # computed once, not once per kind.
    "checks-10": Cell("checks-10", "fast", {"answer_relevance": "checks-10", "groundedness": "checks-6"}),
    # checks-11: checks-8's checks; the judge's reference written under the checks' own system message and layout, so
    # the reference and the item's checks share the question and context as one prefix.
    "checks-11": Cell("checks-11", "fast", {"answer_relevance": "checks-11", "groundedness": "checks-4"}),
    # checks-12: checks-11 with that one system message written for both jobs (what checks-8's item checks were told of
    # the ANSWER, without asking for Yes or No).
    "checks-12": Cell("checks-12", "fast", {"answer_relevance": "checks-12", "groundedness": "checks-4"}),
    # checks-13: checks-12 with each per-sentence and per-point check's question before its sentence or fact (answer
    # relevance checks-13, groundedness checks-7), so the question is computed once per item (or question) and check.
    "checks-13": Cell("checks-13", "fast", {"answer_relevance": "checks-13", "groundedness": "checks-7"}),
    # checks-14: checks-13's conversations with both metrics' cuts refitted to them on dev (answer relevance checks-14,
    # groundedness checks-8).
    "checks-14": Cell("checks-14", "fast", {"answer_relevance": "checks-14", "groundedness": "checks-8"}),
    # checks-16: checks-14 with a reference of only the key points that answer the question (answer relevance
    # checks-16, groundedness checks-8).
    "checks-16": Cell("checks-16", "fast", {"answer_relevance": "checks-16", "groundedness": "checks-8"}),
    # checks-17: checks-14's conversations, each key point read half from the judge's covers and half from the share of
    # its words the answer uses (answer relevance checks-17, groundedness checks-8).
    "checks-17": Cell("checks-17", "fast", {"answer_relevance": "checks-17", "groundedness": "checks-8"}),
    # checks-18: checks-17 with groundedness checks-9 (checks-8 and a veto asked of each sentence beside the whole
    # context, its weakest sentence deciding).
    "checks-18": Cell("checks-18", "fast", {"answer_relevance": "checks-17", "groundedness": "checks-9"}),
    # checks-19: checks-17 with answer relevance's counted veto on an answer that only restates the question (answer
    # relevance checks-19, groundedness checks-8).
    "checks-19": Cell("checks-19", "fast", {"answer_relevance": "checks-19", "groundedness": "checks-8"}),
    # triad-1: checks-19's conversations read as the triad (relevance alone, completeness, groundedness), labelled by
    # TRIAD_VERDICT; the defaults for these three metrics requested together.
    "triad-1": Cell(
        "triad-1", "fast", {"answer_relevance": "checks-20", "completeness": "checks-3", "groundedness": "checks-8"}
    ),
    # triad-2: triad-1 with relevance alone asking whether the answer addresses the question even in part (checks-21).
    "triad-2": Cell(
        "triad-2", "fast", {"answer_relevance": "checks-21", "completeness": "checks-3", "groundedness": "checks-8"}
    ),
}
# What `make bench` grades: the default judge, the chain-of-thought baseline beside it, and context relevance (fast-v2);
# the earlier answer-relevance-only cells (cot-v1, fast-v1) and the other check versions are opt-in.
DEFAULT_CELLS = ("checks-19", "cot-v2", "fast-v2")


def _judgements_path(split: str, cell: Cell, engine: str = "vllm") -> Path:
    suffix = "" if engine == "vllm" else f"_{engine}"  # vLLM's gradings keep the names they always had
    return WORK / "judgements" / f"{split}_{cell.name}{suffix}.jsonl"


def save_judgements(split: str, cell: Cell, results: Sequence[Judgement], engine: str = "vllm") -> Path:
    """Keep a cell's results on a split (bench/work, not committed); `saved_judgements` reuses vLLM's."""
    path = _judgements_path(split, cell, engine)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(r.model_dump_json() + "\n" for r in results)
    return path


def read_judgements(path: Path) -> list[Judgement]:
    """A kept grading: bench/work's as `save_judgements` wrote it, or a gzipped copy (bench/results/judgements)."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return [Judgement.model_validate_json(line) for line in raw.decode("utf-8").splitlines() if line.strip()]


def saved_judgements(split: str, cell: Cell, triples: Sequence[Triple], model: str) -> list[Judgement] | None:
    """The results `save_judgements` kept for this split and cell, if `model` graded exactly these items with the
    cell's prompt versions (the calibration's dev grading is then not repeated)."""
    path = _judgements_path(split, cell)
    if not path.exists():
        return None
    results = [Judgement.model_validate_json(line) for line in path.read_text(encoding="utf-8").splitlines()]
    if [r.id for r in results] != [t.id for t in triples]:
        return None
    if any(r.provenance is None or r.provenance.model != model for r in results):
        return None
    for r in results:
        for metric, version in cell.versions.items():
            m = (r.metrics or {}).get(metric)
            if m is None or m.provenance is None or not m.provenance.prompt.startswith(f"{metric}@{version}."):
                return None
    log.info("cell %s: %s results reused from %s", cell.name, split, path)
    return results


def labelled_set(split: str, limit: int | None) -> list[Triple]:
    """The split's items; with --limit, a spread subset (every k-th item) so every category stays represented.
    (Such a subset shares few contexts, so it costs more per item than a real batch, where a question's answers
    share the question's segments and context relevance is graded once per distinct question and segment.)"""
    triples = read_triples(DATA / f"rag_{split}.jsonl")
    if limit and limit < len(triples):
        step = len(triples) / limit
        triples = [triples[int(i * step)] for i in range(limit)]
    return triples
