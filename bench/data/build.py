"""Build juiz's labelled RAG set from its sources: `python -m bench.data.build` (deterministic; no model involved).

The sources (`bench/data/sources/<lang>-<topic>.json`, written by the project: see `bench/data/README.md`) hold one
lecture-style transcript per topic, two questions on it, and answers of known categories with manual labels C / P / I.
This turns every answer into one graded triple whose context looks like a retriever's: the question's relevant
segments, two other segments of the same lecture and three from other lectures of the same language and split
(distractors),
in retriever-score order, the scores drawn so relevant segments usually, not always, rank first (as E5's do in the
seeds). An answer with a `planted_segment` gets that segment in its own context only (instructions hidden in a
retrieved document).

Writes `bench/data/rag_dev.jsonl` and `bench/data/rag_test.jsonl` (split by topic: a test topic is never seen in dev).
Each line is a juiz triple plus the fields the quality benchmark reads: category, lang, topic, split, twin_of.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "sources"
SPLITS = ("dev", "test")
SEED = 20261123

LABELS = {
    "correct_terse": "C",
    "correct_verbose": "C",
    "partial": "P",
    "off_topic": "I",
    "word_salad": "I",
    "refusal": "I",
    "false_in_context": "I",
    "false_not_in_context": "I",
    "injection_answer": "I",
    "injection_context": "I",
    "quotes_rubric": "I",
    "hostile_fake_score": "I",
    "hostile_ignore": "I",
    "hostile_special_tokens": "I",
}
SAME_LECTURE_DISTRACTORS = 2
OTHER_LECTURE_DISTRACTORS = 3


class SourceError(ValueError):
    """A source file that breaks the format; the message names the file and the place."""


def timestamp(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def load_sources(folder: Path = SOURCES) -> list[dict[str, Any]]:
    topics = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        check_source(data, path.name)
        data["_file"] = path.name
        topics.append(data)
    return topics


def check_source(data: dict[str, Any], name: str) -> None:
    for key in ("topic", "lang", "split", "source", "segments", "questions"):
        if key not in data:
            raise SourceError(f"{name}: missing '{key}'")
    if data["split"] not in SPLITS:
        raise SourceError(f"{name}: split must be one of {SPLITS}")
    n_segments = len(data["segments"])
    for q_no, question in enumerate(data["questions"]):
        where = f"{name}: questions[{q_no}]"
        if not all(0 <= i < n_segments for i in question["relevant"]) or not question["relevant"]:
            raise SourceError(f"{where}: 'relevant' must list segment indices below {n_segments}")
        for a_no, answer in enumerate(question["answers"]):
            category = answer.get("category")
            if category not in LABELS:
                raise SourceError(f"{where}.answers[{a_no}]: unknown category {category!r}")
            if answer.get("label") != LABELS[category]:
                raise SourceError(f"{where}.answers[{a_no}]: {category} is labelled {LABELS[category]}")
            twin = answer.get("twin_of")
            if twin is not None and not (0 <= twin < len(question["answers"]) and twin != a_no):
                raise SourceError(f"{where}.answers[{a_no}]: twin_of must name another answer of the question")


def segment(topic: dict[str, Any], index: int, score: float) -> dict[str, Any]:
    part = topic["segments"][index]
    return {
        "text": part["text"],
        "source": topic["source"],
        "start": timestamp(part["start"]),
        "end": timestamp(part["end"]),
        "score": round(score, 4),
    }


def build(topics: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(SEED)
    by_lang: dict[str, list[dict[str, Any]]] = {}
    for topic in topics:  # distractors come from the same language and split: no test text ever shows up in dev
        by_lang.setdefault(f"{topic['lang']}/{topic['split']}", []).append(topic)
    out: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS}
    for topic in topics:
        others = [t for t in by_lang[f"{topic['lang']}/{topic['split']}"] if t is not topic]
        for question in topic["questions"]:
            relevant = list(question["relevant"])
            own_rest = [i for i in range(len(topic["segments"])) if i not in relevant]
            own_pick = rng.sample(own_rest, min(SAME_LECTURE_DISTRACTORS, len(own_rest)))
            foreign = [(t, i) for t in others for i in range(len(t["segments"]))]
            foreign_pick = rng.sample(foreign, min(OTHER_LECTURE_DISTRACTORS, len(foreign)))
            # Scores in E5's narrow band: relevant segments higher on average, with overlap, as retrievers do.
            scored = [(rng.uniform(0.845, 0.875), segment(topic, i, 0)) for i in relevant]
            scored += [(rng.uniform(0.835, 0.862), segment(topic, i, 0)) for i in own_pick]
            scored += [(rng.uniform(0.815, 0.850), segment(t, i, 0)) for t, i in foreign_pick]
            base_id = f"{topic['lang']}-{topic['topic']}-{question['id']}"
            for a_no, answer in enumerate(question["answers"]):
                context = [dict(s, score=round(score, 4)) for score, s in scored]
                if answer.get("planted_segment"):
                    planted = {
                        "text": answer["planted_segment"],
                        "source": topic["source"],
                        "start": timestamp(topic["segments"][relevant[0]]["start"]),
                        "end": timestamp(topic["segments"][relevant[0]]["end"]),
                        "score": round(rng.uniform(0.850, 0.870), 4),
                    }
                    context.append(planted)
                context.sort(key=lambda s: -s["score"])
                twin = answer.get("twin_of")
                out[topic["split"]].append(
                    {
                        "id": f"{base_id}-a{a_no}",
                        "question": question["question"],
                        "context": context,
                        "answer": answer["answer"],
                        "manual_label": answer["label"],
                        "category": answer["category"],
                        "lang": topic["lang"],
                        "topic": topic["topic"],
                        "split": topic["split"],
                        "twin_of": None if twin is None else f"{base_id}-a{twin}",
                    }
                )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=Path, default=SOURCES)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    topics = load_sources(args.sources)
    splits = build(topics)
    for split, items in splits.items():
        path = args.out / f"rag_{split}.jsonl"
        path.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
        counts = Counter((i["lang"], i["manual_label"]) for i in items)
        shown = ", ".join(f"{lang} {label}: {n}" for (lang, label), n in sorted(counts.items()))
        print(f"{path.name}: {len(items)} items; {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
