"""Where the demo's seconds go: the seeds graded as `juiz demo` grades them, per judge design, engine call by engine
call: `python -m bench.seeds_calls --prompt answer_relevance@checks-12 --prompt answer_relevance@checks-14`.

    flock /tmp/juiz-heavy.lock .venv/bin/python -m bench.seeds_calls

One engine (the one `JUIZ_ENGINE` picks); the designs one after the other on the same three seeds, each from an empty
prefix cache (vLLM's emptied; llama.cpp started again, its slots' caches can't be emptied), so none is served what
another computed. For each engine call: its conversations, prompt tokens, the prompt tokens the engine computed (its
own counts: prompt less what its prefix cache served), reply tokens and seconds; and per call the computed tokens by
the opening words of each conversation's system message (which kind of conversation computes what).
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

from bench.common import reset_prefix_cache, save, setup_logging
from bench.judge_quality import CountingEngine
from juiz.engines.models import DEFAULT_MODEL
from juiz.formats.readers import read_triples
from juiz.judging.backend import build_engine
from juiz.judging.judge import Judge
from juiz.runtime.settings import Settings
from schemas import BatchOptions

log = logging.getLogger("bench.seeds_calls")
SEEDS = Path(__file__).resolve().parent.parent / "examples" / "seeds"
DESIGNS = ("answer_relevance@checks-12", "answer_relevance@checks-14")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", action="append", default=[], help=f"a design (default: {', '.join(DESIGNS)})")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--name", default="seeds_calls", help="results file name")
    args = parser.parse_args(argv)
    setup_logging()
    designs = args.prompt or list(DESIGNS)
    triples = [t for path in sorted(SEEDS.glob("00*.txt")) for t in read_triples(path)]
    settings = Settings.from_env(None, model=args.model)
    started = time.perf_counter()
    engine = build_engine(settings, say=log.info)
    startup = time.perf_counter() - started
    sides: dict[str, Any] = {}
    try:
        for n, design in enumerate(designs):
            if n and not reset_prefix_cache(engine):  # a cache that can't be emptied (llama.cpp's slots): a new engine
                engine.close()
                engine = build_engine(settings, say=log.info)
            counting = CountingEngine(engine)
            options = BatchOptions.model_validate({"metrics": [design.split("@")[0]], "prompt": design})
            began = time.perf_counter()
            results = Judge(counting).grade(triples, options)
            seconds = time.perf_counter() - began
            calls = counting.take()["calls_s"]
            sides[design] = {
                "grading_s": round(seconds, 1),
                "computed_prompt_tokens": sum(c["computed_prompt_tokens"] for c in calls),
                "prompt_tokens": sum(c["prompt_tokens"] for c in calls),
                "reply_tokens": sum(c["reply_tokens"] for c in calls),
                "labels": [r.automated_label for r in results],
                "calls": calls,
            }
            log.info("%s: %.1fs, %s", design, seconds, {k: v for k, v in sides[design].items() if k != "calls"})
    finally:
        engine.close()
    first = designs[0]
    ratios = {
        f"{design} / {first}": {
            "grading_s": round(sides[design]["grading_s"] / sides[first]["grading_s"], 3),
            "computed_prompt_tokens": round(
                sides[design]["computed_prompt_tokens"] / max(1, sides[first]["computed_prompt_tokens"]), 3
            ),
        }
        for design in designs[1:]
    }
    path = save(
        args.name,
        {"engine": dict(engine.origin), "items": len(triples), "startup_s": round(startup, 1), "designs": sides}
        | {"ratios": ratios},
    )
    print(f"ratios: {ratios}\nwritten: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
