"""Calibration, sampling and hostile pairs on juiz's labelled RAG set (issue 9): what a calibration to the user's
labels buys, what n sampled replies buy and cost, and whether hostile text ever lifts a score.

For one cell of bench.judge_quality (a mode and a prompt version per metric; default cot-v2: answer relevance and
groundedness, CoT):
- raw vs calibrated agreement with the manual C/P/I labels, held out twice over: fit on `dev` and report on `test`,
  and cross-fitted on `test` (5 folds, each item predicted by a model that never saw its label). Raw is the verdict
  (juiz's DEFAULT_VERDICT over answer relevance and groundedness) or, for one metric, its score. Brier score and ECE
  for the calibrated probabilities (and for the raw label taken as certain);
- n = 1, 3, 5 sampled CoT replies (temperature 0.7 for n > 1) on a spread subset of `test`: agreement of the
  majority score (answer relevance) and of the verdict, share flagged uncertain, and judgements per second;
- hostile pairs: for each hostile item, its score minus its plain twin's (`twin_of`), maximum and mean, for the
  discrete score, 3 × the expected score and the calibrated class.

    .venv/bin/python -m bench.calibration_quality [--cell cot-v2] [--samples 1,3,5] [--samples-limit 40] [--quick]

bench.judge_quality calls the same functions with `--calibration` / `--samples` (JSON keys `calibration`, `samples`).
--quick: the tiny test model on a few items, plumbing only (results go to bench/work/quick-results).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import WORK, close_engine, load_engine, save, setup_logging, table
from bench.labelled import CELLS, labelled_set, save_judgements, saved_judgements
from juiz.agreement.labels import class_of_label, main_metric, metric_of, metric_value, with_default_verdict
from juiz.agreement.statistics import compute_agreement, metric_signal, verdict_signal
from juiz.calibration.agreement import calibrated_probabilities, calibrated_signal, compute_calibrated_agreement
from juiz.calibration.figures import figures
from juiz.calibration.fitting import CLASS_WEIGHTS, CalibrationUnavailable, fit_from_results
from juiz.calibration.grades import apply_calibration
from juiz.engines.models import DEFAULT_MODEL, TEST_MODEL
from juiz.judging.judge import Judge
from schemas import BatchOptions, Judgement, JudgementStatus, LabelMapping, Provenance, Triple
from schemas.judgement import MetricResult, MetricStatus

log = logging.getLogger("bench.calibration_quality")

TARGET_KAPPA_GAIN = 0.1
TARGET_ECE = 0.1


def mapping_for(metrics: Sequence[str]) -> LabelMapping:
    """The raw side: the verdict over answer relevance and groundedness when both are graded, else the score."""
    if {"answer_relevance", "groundedness"} <= set(metrics):
        return with_default_verdict(LabelMapping())
    return LabelMapping()


def _figures(report: Any) -> dict[str, Any]:
    def value(stat: Any) -> float | None:
        return None if stat.value is None else round(stat.value, 3)

    return {
        "n": report.n,
        "accuracy": value(report.accuracy),
        "kappa_quadratic": value(report.cohen_kappa_quadratic),
        "spearman": value(report.spearman_rho),
        "mae": value(report.mae),
        "confusion_matrix": report.confusion_matrix,
    }


def _labels(results: Sequence[Judgement], mapping: LabelMapping) -> np.ndarray:
    return np.asarray([class_of_label(j.manual_label, mapping, "0-3") for j in results if j.manual_label is not None])


def calibration_section(
    dev: Sequence[Judgement] | None, test: Sequence[Judgement], metrics: Sequence[str], *, resamples: int = 200
) -> dict[str, Any]:
    """Raw vs calibrated on `test`: fit on `dev` (held-out split; skipped when None) and cross-fitted on `test`."""
    mapping = mapping_for(metrics)
    raw_signal = verdict_signal(mapping) if mapping.verdict is not None else None
    out: dict[str, Any] = {"raw_signal": "verdict" if mapping.verdict is not None else "score"}

    crossed = compute_calibrated_agreement(test, mapping, resamples=resamples)
    out["cross_fitted_test"] = {
        "features": crossed.features,
        "folds": crossed.folds,
        "unavailable": crossed.unavailable,
        "raw": _figures(crossed.raw) if crossed.raw else None,
        "calibrated": _figures(crossed.calibrated) if crossed.calibrated else None,
        "raw_brier_ece": _brier_ece(crossed.raw_figures),
        "calibrated_brier_ece": _brier_ece(crossed.calibrated_figures),
        "reliability": [b.model_dump() for b in crossed.calibrated_figures.reliability]
        if crossed.calibrated_figures
        else None,
    }
    if dev is None:
        out["dev_to_test"] = {"unavailable": "no dev results (the report split is dev)"}
        return _with_targets(out)
    try:
        calibration = fit_from_results(dev, mapping)
    except CalibrationUnavailable as why:
        out["dev_to_test"] = {"unavailable": str(why)}
        return out
    applied = [j.model_copy(deep=True) for j in test]
    spec = calibration.spec()
    for j in applied:
        apply_calibration(j, spec)
    with_label = [j for j in applied if j.calibrated is not None and j.calibrated.label is not None]
    raw = compute_agreement(with_label, mapping, resamples=0, signal=raw_signal)
    calibrated = compute_agreement(with_label, mapping, resamples=0, signal=calibrated_signal(mapping))
    labels = _labels(with_label, mapping)
    out["dev_to_test"] = {
        "calibration": {
            "id": calibration.id,
            "sha256": calibration.sha256,
            "features": calibration.features,
            "class_weight": calibration.cross_fitted.get("class_weight"),
            "dev_kappa_quadratic_by_class_weight": calibration.cross_fitted.get("kappa_quadratic_by_class_weight"),
        },
        "fit_on": calibration.cross_fitted.get("n"),
        "raw": _figures(raw),
        "calibrated": _figures(calibrated),
        "calibrated_brier_ece": _brier_ece(figures(calibrated_probabilities(with_label, mapping), labels))
        if len(labels)
        else None,
        "not_calibrated": len(applied) - len(with_label),
        # What each weighting would have given here (the fit chose on dev alone): the choice's cost or gain, shown.
        "calibrated_by_class_weight": {
            weight or "none": _dev_to_test(dev, test, mapping, weight) for weight in CLASS_WEIGHTS
        },
    }
    return _with_targets(out)


def _dev_to_test(
    dev: Sequence[Judgement], test: Sequence[Judgement], mapping: LabelMapping, weight: str | None
) -> dict[str, Any]:
    """Calibrated figures on `test` of a calibration fit on `dev` with this one class weighting."""
    spec = fit_from_results(dev, mapping, class_weights=(weight,)).spec()
    applied = [j.model_copy(deep=True) for j in test]
    for j in applied:
        apply_calibration(j, spec)
    with_label = [j for j in applied if j.calibrated is not None and j.calibrated.label is not None]
    return _figures(compute_agreement(with_label, mapping, resamples=0, signal=calibrated_signal(mapping)))


def _with_targets(out: dict[str, Any]) -> dict[str, Any]:
    for key in ("cross_fitted_test", "dev_to_test"):
        section = out[key]
        if section.get("raw") and section.get("calibrated"):
            raw_k, cal_k = section["raw"]["kappa_quadratic"], section["calibrated"]["kappa_quadratic"]
            section["kappa_gain"] = None if raw_k is None or cal_k is None else round(cal_k - raw_k, 3)
            ece = (section.get("calibrated_brier_ece") or {}).get("ece")
            section["targets"] = {
                f"kappa_gain>={TARGET_KAPPA_GAIN}": section["kappa_gain"] is not None
                and section["kappa_gain"] >= TARGET_KAPPA_GAIN,
                f"ece<={TARGET_ECE}": ece is not None and ece <= TARGET_ECE,
            }
    return out


def judge_quality_sections(
    judge: Judge,
    cells: Sequence[Any],
    graded: dict[str, list[Judgement]],
    triples: Sequence[Triple],
    *,
    split: str,
    limit: int | None,
    calibration: bool,
    samples: Sequence[int],
    samples_limit: int,
) -> dict[str, Any]:
    """What `bench.judge_quality --calibration --samples 1,3,5` adds (JSON keys `calibration`, `samples`,
    `hostile_pairs`): per cell, raw vs calibrated (fit on dev when the report split is test; cross-fitted always)
    and hostile pairs; sampled replies for the first CoT cell grading answer relevance."""

    out: dict[str, Any] = {"hostile_pairs": {}}
    if calibration:
        out["calibration"] = {}
    for cell in cells:
        results = graded.get(cell.name)
        if results is None or "answer_relevance" not in cell.versions:
            continue
        metrics = list(cell.versions)
        out["hostile_pairs"][cell.name] = hostile_section(triples, results, metrics)
        if calibration:
            dev = None
            if split == "test":
                dev_set = labelled_set("dev", limit)
                saved = saved_judgements("dev", cell, dev_set, judge.engine.model_id)
                dev = saved or judge.grade(dev_set, cell.options())
            out["calibration"][cell.name] = calibration_section(dev, results, metrics)
    cot = next((c for c in cells if c.mode == "cot" and "answer_relevance" in c.versions), None)
    if samples and cot is not None:
        subset = labelled_set(split, samples_limit)
        out["samples"] = {
            "cell": cot.name,
            "rows": samples_section(judge, lambda n: with_samples(cot.options(), n), subset, samples),
        }
    return out


def _brier_ece(f: Any) -> dict[str, float] | None:
    return None if f is None else {"brier": round(f.brier, 3), "ece": round(f.ece, 3)}


def hostile_pairs(
    triples: Sequence[Triple], results: Sequence[Judgement], value: Callable[[Judgement], float | None]
) -> dict[str, Any]:
    """Hostile minus plain twin (`twin_of`: the plain answer's id, or its answer number), max and mean."""
    by_id = {t.id: r for t, r in zip(triples, results, strict=True)}
    lifts: list[float] = []
    missing = 0
    for t, r in zip(triples, results, strict=True):
        twin = t.passthrough().get("twin_of")
        if twin is None:
            continue
        plain_id = twin if isinstance(twin, str) else t.id.rsplit("-a", 1)[0] + f"-a{twin}"
        plain = by_id.get(plain_id)
        hostile_value, plain_value = value(r), (value(plain) if plain is not None else None)
        if hostile_value is None or plain_value is None:
            missing += 1
            continue
        lifts.append(hostile_value - plain_value)
    return {
        "pairs": len(lifts),
        "not_comparable": missing,
        "max": round(max(lifts), 3) if lifts else None,
        "mean": round(statistics.mean(lifts), 3) if lifts else None,
        "above_twin": sum(lift > 0 for lift in lifts),
    }


def hostile_section(triples: Sequence[Triple], results: Sequence[Judgement], metrics: Sequence[str]) -> dict:
    mapping = mapping_for(metrics)

    # The main metric's own grade (the top level holds the verdict when one applies: that is `verdict_class`).
    def score(j: Judgement) -> float | None:
        return metric_value(metric_of(j, main_metric(j)), "score")

    def expected(j: Judgement) -> float | None:
        return metric_value(metric_of(j, main_metric(j)), "expected_score")

    verdict = verdict_signal(mapping) if mapping.verdict is not None else None
    out = {"score": hostile_pairs(triples, results, score), "expected_x3": hostile_pairs(triples, results, expected)}
    if verdict is not None:
        out["verdict_class"] = hostile_pairs(triples, results, lambda j: _first(verdict(j)))
    calibrated = calibrated_signal(mapping)
    if any(j.calibrated is not None for j in results):
        out["calibrated_class"] = hostile_pairs(triples, results, lambda j: _first(calibrated(j)))
    return out


def _first(value: tuple[int, float, float] | None) -> float | None:
    return None if value is None else float(value[0])


def samples_section(
    judge: Judge, options_for: Callable[[int], Any], triples: Sequence[Triple], ns: Sequence[int]
) -> list[dict[str, Any]]:
    """For each n: grade `triples` with n sampled replies; agreement, uncertainty and throughput."""
    rows = []
    for n in ns:
        options = options_for(n)
        started = time.perf_counter()
        results = judge.grade(triples, options)
        seconds = time.perf_counter() - started
        mapping = mapping_for(options.metrics)
        ar = compute_agreement(results, LabelMapping(), resamples=0, signal=metric_signal("answer_relevance", mapping))
        row: dict[str, Any] = {
            "n": n,
            "temperature": options.sampling_temperature,
            "items": len(triples),
            "seconds": round(seconds, 1),
            "judgements_per_s": round(len(triples) / seconds, 3) if seconds else None,
            "answer_relevance": _figures(ar),
            "uncertain_share": round(sum(bool(j.uncertain) for j in results) / len(results), 3),
            "mean_std": _mean([j.samples.std for j in results if j.samples is not None and j.samples.std is not None]),
            "mean_majority_share": _mean([j.samples.majority_share for j in results if j.samples is not None]),
            "parse_errors": sum(j.status == "parse_error" for j in results),
        }
        if mapping.verdict is not None:
            row["verdict"] = _figures(compute_agreement(results, mapping, resamples=0, signal=verdict_signal(mapping)))
        rows.append(row)
        log.info("samples n=%d: %d items in %.0fs", n, len(triples), seconds)
    return rows


def with_samples(options: BatchOptions, n: int) -> BatchOptions:
    """The cell's options with n samples (validated: n > 1 needs CoT)."""
    return BatchOptions.model_validate({**options.model_dump(), "samples": n})


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.mean(values), 3) if values else None


def print_sections(calibration: dict[str, Any] | None, samples: Sequence[dict], hostile: dict | None) -> None:
    if calibration:
        rows = []
        for key in ("cross_fitted_test", "dev_to_test"):
            s = calibration.get(key) or {}
            if not s.get("raw") or not s.get("calibrated"):
                rows.append([key, "-", "-", "-", "-", "-", "-", s.get("unavailable")])
                continue
            be = s.get("calibrated_brier_ece") or {}
            rows.append(
                [
                    key,
                    f"{s['raw']['accuracy']} / {s['calibrated']['accuracy']}",
                    f"{s['raw']['kappa_quadratic']} / {s['calibrated']['kappa_quadratic']}",
                    f"{s['raw']['spearman']} / {s['calibrated']['spearman']}",
                    s.get("kappa_gain"),
                    be.get("brier"),
                    be.get("ece"),
                    s["calibrated"]["n"],
                ]
            )
        print(f"raw ({calibration['raw_signal']}) vs calibrated, on test")
        print(table(rows, ["held out", "acc raw/cal", "qκ raw/cal", "ρ raw/cal", "qκ gain", "Brier", "ECE", "n"]))
    if samples:
        print("\nsampled replies (test subset)")
        print(
            table(
                [
                    [
                        r["n"],
                        r["temperature"],
                        r["answer_relevance"]["accuracy"],
                        r["answer_relevance"]["kappa_quadratic"],
                        (r.get("verdict") or {}).get("kappa_quadratic"),
                        r["uncertain_share"],
                        r["mean_std"],
                        r["judgements_per_s"],
                        r["seconds"],
                    ]
                    for r in samples
                ],
                ["n", "temp", "AR acc", "AR qκ", "verdict qκ", "uncertain", "mean std", "items/s", "s"],
            )
        )
    if hostile:
        print("\nhostile minus plain twin")
        print(
            table(
                [[k, v["pairs"], v["max"], v["mean"], v["above_twin"]] for k, v in hostile.items()],
                ["signal", "pairs", "max", "mean", "above twin"],
            )
        )


def results_from_replies(path: Path, cell: str) -> tuple[list[Triple], list[Judgement]]:
    """A bench.judge_quality results file's per-item grades (`replies`) back as results, with their items: enough
    for the calibration and hostile-pair figures without grading again."""

    payload = json.loads(path.read_text(encoding="utf-8"))
    items = {t.id: t for t in labelled_set(payload["split"], None)}
    provenance = Provenance(model=payload["model"], prompt="", prompt_sha256="", sampling={}, juiz_version="bench")
    triples, results = [], []
    for reply in payload["replies"][cell]:
        metrics = {
            name: MetricResult(
                status=MetricStatus(m["status"]), score=m["score"], expected_score=m["expected"], provenance=provenance
            )
            for name, m in reply["verdict_inputs"].items()
        }
        main_metric = metrics.get("answer_relevance") or next(iter(metrics.values()))
        triple = items[reply["id"]]
        triples.append(triple)
        results.append(
            Judgement(
                id=triple.id,
                status=JudgementStatus(main_metric.status.value if main_metric.status.value != "skipped" else "failed"),
                score=main_metric.score,
                expected_score=main_metric.expected_score,
                question=triple.question,
                answer=triple.answer,
                manual_label=triple.manual_label,
                provenance=provenance,
                metrics=metrics,
            )
        )
    return triples, results


def offline(paths: Sequence[Path], cell: str) -> int:
    """--from-results TEST.json [DEV.json]: calibration and hostile pairs from judge_quality results files."""
    test_triples, test = results_from_replies(paths[0], cell)
    dev = results_from_replies(paths[1], cell)[1] if len(paths) > 1 else None
    metrics = list(next(iter(test)).metrics or {})
    calibration = calibration_section(dev, test, metrics)
    hostile = hostile_section(test_triples, test, metrics)
    print_sections(calibration, [], hostile)
    path = save(
        f"calibration_quality_{cell}_from_results",
        {
            "from_results": [str(p) for p in paths],
            "cell": cell,
            "items": {"test": len(test), "dev": len(dev) if dev is not None else None},
            "calibration": calibration,
            "hostile_pairs": hostile,
        },
    )
    print(f"\nwritten: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", default="cot-v2", help=f"one of {', '.join(CELLS)} (default cot-v2)")
    parser.add_argument("--model", default=None, help=f"judge model (default {DEFAULT_MODEL}; --quick: {TEST_MODEL})")
    parser.add_argument("--limit", type=int, default=None, help="a spread subset of N items of each split")
    parser.add_argument("--samples", default="1,3,5", help="sample counts to compare ('' to skip)")
    parser.add_argument("--samples-limit", type=int, default=40, help="test items graded for each sample count")
    parser.add_argument("--quick", action="store_true", help="tiny model, a few items: plumbing only")
    parser.add_argument(
        "--from-results",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="no grading: bench.judge_quality results of the report split, then optionally of dev (fit there)",
    )
    args = parser.parse_args(argv)
    setup_logging()
    if args.from_results:
        return offline(args.from_results, args.cell)
    if args.cell not in CELLS:
        parser.error(f"unknown cell {args.cell}; known: {', '.join(CELLS)}")
    cell = CELLS[args.cell]
    model = args.model or (TEST_MODEL if args.quick else DEFAULT_MODEL)
    limit = args.limit or (24 if args.quick else None)
    ns = [int(n) for n in args.samples.split(",") if n.strip()]
    samples_limit = 6 if args.quick else args.samples_limit
    if args.quick:
        os.environ.setdefault("JUIZ_BENCH_RESULTS", str(WORK / "quick-results"))
    dev, test = labelled_set("dev", limit), labelled_set("test", limit)
    started = time.perf_counter()
    # Results `bench.judge_quality --save-judgements` kept for this cell are used as they are (the same grading)
    dev_results, test_results = saved_judgements("dev", cell, dev, model), saved_judgements("test", cell, test, model)
    options = cell.options()
    samples: list[dict[str, Any]] = []
    if dev_results is None or test_results is None or ns:
        engine = load_engine(model)
        judge = Judge(engine)
        judge.warm_up()
        try:
            if dev_results is None:
                dev_results = judge.grade(dev, options)
                if not args.quick:  # the tiny model's grades must never stand in for the judge's
                    save_judgements("dev", cell, dev_results)
            if test_results is None:
                test_results = judge.grade(test, options)
                if not args.quick:
                    save_judgements("test", cell, test_results)
            subset = labelled_set("test", samples_limit)
            samples = samples_section(judge, lambda n: with_samples(options, n), subset, ns) if ns else []
        finally:
            close_engine(engine)
    calibration = calibration_section(dev_results, test_results, list(cell.versions))
    hostile = hostile_section(test, test_results, list(cell.versions))
    print_sections(calibration, samples, hostile)
    path = save(
        "calibration_quality" + ("_quick" if args.quick else ""),
        {
            "model": model,
            "quick": args.quick,
            "cell": {"name": cell.name, "mode": cell.mode, "versions": cell.versions},
            "items": {"dev": len(dev), "test": len(test), "samples_subset": samples_limit},
            "calibration": calibration,
            "samples": samples,
            "hostile_pairs": hostile,
            "total_s": round(time.perf_counter() - started, 1),
        },
    )
    print(f"\nwritten: {path} ({time.perf_counter() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
