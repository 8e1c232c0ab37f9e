"""The context budget (`BatchOptions.context_chars`) on the seeds, side by side in one run on one engine: every seed
graded with the default budget and with none (the whole retrieved context), alternating, the engine's prefix cache
emptied before each cell where it can be. Per cell: seconds, prompt tokens per item and how many the cache did not
serve, and each seed's score, expected score, automated label and the segments shown (the budget keeps the
segments the question is most about).

    .venv/bin/python -m bench.context_budget [--rounds 2] [--model NAME]

Hold the heavy lock: `flock /tmp/juiz-heavy.lock .venv/bin/python -m bench.context_budget`.
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import time
from typing import Any

from bench.common import reset_prefix_cache, save, setup_logging, table
from bench.judge_quality import CountingEngine
from juiz.engines.models import DEFAULT_MODEL
from juiz.formats.readers import read_triples
from juiz.judging.backend import build_engine
from juiz.judging.judge import Judge, context_segments, shown_context
from juiz.runtime.settings import Settings
from schemas import BatchOptions
from service.demo import SEEDS

log = logging.getLogger("bench.context_budget")

CELLS: dict[str, int | None] = {"budget": BatchOptions().context_chars, "whole": None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="each cell graded this many times, alternating")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args()
    setup_logging()
    triples = [t for path in sorted(SEEDS.glob("00*.txt")) for t in read_triples(path)]
    engine = build_engine(Settings.from_env(model=args.model))
    counting = CountingEngine(engine)
    judge = Judge(counting)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CELLS}
    try:
        for _ in range(args.rounds):
            for name, budget in CELLS.items():
                reset_prefix_cache(engine)
                options = BatchOptions(context_chars=budget)
                started = time.perf_counter()
                results = judge.grade(triples, options)
                seconds = time.perf_counter() - started
                counts = counting.take()
                runs[name].append(
                    {
                        "seconds": round(seconds, 1),
                        "prompt_tokens_per_item": round(counts.get("prompt_tokens", 0) / len(triples)),
                        "uncached_prompt_tokens_per_item": round(
                            (counts.get("prompt_tokens", 0) - counts.get("cached_prompt_tokens", 0)) / len(triples)
                        ),
                        "items": [
                            {
                                "id": t.id,
                                "segments_shown": re.findall(
                                    r"^\[(\d+)\]",
                                    shown_context(t, context_segments(t.context), budget),
                                    flags=re.MULTILINE,
                                ),
                                "score": r.score,
                                "expected_score": r.expected_score,
                                "automated_label": r.automated_label,
                                "manual_label": t.manual_label,
                            }
                            for t, r in zip(triples, results, strict=True)
                        ],
                    }
                )
                log.info("%s: %.1fs, %s", name, seconds, [(i["id"], i["score"]) for i in runs[name][-1]["items"]])
    finally:
        close = getattr(engine, "close", None)
        if close is not None:
            close()
    summary = {
        name: {
            "context_chars": CELLS[name],
            "seconds_median": statistics.median(r["seconds"] for r in rows),
            "uncached_prompt_tokens_per_item": rows[0]["uncached_prompt_tokens_per_item"],
            "prompt_tokens_per_item": rows[0]["prompt_tokens_per_item"],
        }
        for name, rows in runs.items()
    }
    ratio = round(summary["budget"]["seconds_median"] / summary["whole"]["seconds_median"], 3)
    print(
        table(
            [
                [
                    name,
                    s["context_chars"],
                    s["seconds_median"],
                    s["prompt_tokens_per_item"],
                    s["uncached_prompt_tokens_per_item"],
                ]
                + [f"{i['id']} {i['score']} {i['automated_label']}" for i in runs[name][-1]["items"]]
                for name, s in summary.items()
            ],
            [
                "cell",
                "context_chars",
                "s (median)",
                "prompt tok/item",
                "uncached tok/item",
                "seed 1",
                "seed 2",
                "seed 3",
            ],
        )
    )
    print(f"seconds budget/whole = {ratio}")
    save(
        "context_budget",
        {
            "engine": dict(engine.origin),
            "rounds": args.rounds,
            "summary": summary,
            "budget_over_whole_s": ratio,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
