"""A linear probe on the judge's hidden states, trained on a split's own synthetic claims, applied as a veto.

Two steps, so that the engine runs stay short (the machine-wide lock) and the evaluation needs no engine:

    flock /tmp/juiz-heavy.lock nice -n 19 .venv/bin/python -m bench.probe states --split dev --budget-s 780
    .venv/bin/python -m bench.probe evaluate [--test]

`states` reads, with the judge model in transformers, the hidden states (several layers) and P(Yes) of a yes/no
check conversation for every synthetic claim built from the split's contexts (`juiz synth`, claims about one
passage grouped under one shared context) and for every sentence of every recorded answer beside its item's context;
it caches them per group under bench/work/probe/ (git-ignored) and stops at the budget; run again to continue.

`evaluate` fits the probe (juiz.judging.probe) on the split's synthetic claims only — never its labels or answers —
and applies it to the recorded judgements of the default judge like bench.verifier: an answer's P(supported) is its
least supported sentence's; the AUC of that between correct and false answers; the default verdict with
groundedness capped at 1 where it is below the cut. Layers, regularisation and cut are chosen on dev; `--test`
trains on the test split's contexts and reports test once at dev's choice.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score

import prompts
from bench.common import RESULTS, WORK, save, table
from bench.labelled import CELLS
from bench.regrade import regraded
from bench.verifier import CORRECT, FALSE, RUNS, _figures, _verdict, cells_table
from juiz.engines.cpu import native_bf16
from juiz.engines.models import DEFAULT_MODEL, resolve_model
from juiz.judging.probe import PROMPT_HASH, Probe, claim_groups, feature_matrix, train
from juiz.judging.sentences import split_sentences
from juiz.judging.synthetic import SUPPORTED, Example, Passage, build_examples
from schemas import Judgement, Triple

LAYERS = (8, 14, 20, 24, 28)  # of Qwen2.5-1.5B's 28; 28 is the last (after the final norm)
CACHE = WORK / "probe"
SEED = 0
# One passage's claims in every SYNTHETIC_STRIDE: reading states runs at ~50 tokens/s on the 2-core machine, and all
# of a split's ~95 passages (~1,250 claims, ~90k tokens) would take ~30 min per split.
SYNTHETIC_STRIDE = 3
# The prompt version whose whole-context check `engine` asks of the judge engine (`--version` asks another's).
ENGINE_VERSION = "checks-9"
ENGINE_CHECK = "stated_by_context"


@dataclass(frozen=True)
class Group:
    """Claims checked against the same passages (one shared prompt prefix)."""

    passages: tuple[str, ...]
    claims: tuple[str, ...]

    @property
    def key(self) -> str:
        blob = json.dumps([PROMPT_HASH, reader_dtype(), self.passages, self.claims], ensure_ascii=False).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def judgements(split: str, graded: str | None = None) -> list[dict[str, Any]]:
    """A split's recorded judgements: `graded` names the file (default: bench.verifier's run of the split)."""
    with gzip.open(RESULTS / "judgements" / f"{graded or RUNS[split]}.jsonl.gz", "rt") as recorded:
        return [json.loads(line) for line in recorded]


def rescored(recorded: list[dict[str, Any]], cell: str) -> list[dict[str, Any]]:
    """The judgements as the cell's prompts grade the same replies (bench.regrade: new cuts, a rule, the answer's words
    read beside the judge's; e.g. checks-17 on a checks-14 grading)."""
    return [regraded(Judgement.model_validate(j), CELLS[cell]).model_dump(mode="json") for j in recorded]


def synthetic_groups(split: str, stride: int = SYNTHETIC_STRIDE) -> tuple[list[Group], list[list[Example]]]:
    """The split's synthetic examples grouped as `juiz train --probe` groups them (juiz.judging.probe.claim_groups)."""
    recorded = judgements(split)
    passages = [Passage(s["text"], s.get("source") or j["id"]) for j in recorded for s in j["context"] or []]
    grouped = claim_groups(build_examples(passages, seed=SEED), stride, SEED)
    groups = [Group(tuple(context), tuple(e.claim for e in rows)) for context, rows in grouped]
    return groups, [rows for _, rows in grouped]


def answer_groups(split: str) -> tuple[list[Group], dict[str, list[tuple[int, int]]]]:
    """Every recorded answer's sentences beside its item's context; per item id, (group, claim) positions."""
    by_context: dict[tuple[str, ...], list[str]] = defaultdict(list)
    where: dict[str, list[tuple[tuple[str, ...], str]]] = {}
    for j in judgements(split):
        context = tuple(s["text"] for s in j["context"] or [])
        if not context:
            continue
        sentences = split_sentences(j["answer"], min_words=1) or ([j["answer"]] if j["answer"].strip() else [])
        where[j["id"]] = [(context, s) for s in sentences]
        for s in sentences:
            if s not in by_context[context]:
                by_context[context].append(s)
    groups = [Group(c, tuple(claims)) for c, claims in by_context.items()]
    index = {g.passages: (i, {c: k for k, c in enumerate(g.claims)}) for i, g in enumerate(groups)}
    positions = {item: [(index[c][0], index[c][1][s]) for c, s in pairs] for item, pairs in where.items()}
    return groups, positions


def reader_dtype() -> str:
    """As `juiz train --probe` reads: bf16 where the CPU computes it natively, float32 where it would be emulated."""
    return "bfloat16" if native_bf16() else "float32"


def _cached(group: Group) -> Path:
    return CACHE / f"{group.key}.npz"


def read_states(splits: list[str], budget_s: float) -> None:
    """Read what is missing, in order: each split's answers, then its synthetic claims (nothing evaluates without
    the answers); stop after budget_s (a rerun continues)."""
    from juiz.judging.probe import StateReader

    # A stride twice as long picks a subset of the same groups: read first, it gives every split a smaller training
    # set early; the rest follows.
    groups = [g for split in splits for g in answer_groups(split)[0] + synthetic_groups(split, 2 * SYNTHETIC_STRIDE)[0]]
    groups += [g for split in splits for g in synthetic_groups(split)[0] if g not in groups]
    split = ",".join(splits)
    todo = [g for g in groups if not _cached(g).exists()]
    print(f"{split}: {len(groups)} groups, {len(todo)} to read", flush=True)
    if not todo:
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    reader = StateReader(resolve_model(DEFAULT_MODEL), LAYERS, dtype=reader_dtype())
    loaded_s = time.perf_counter() - started
    claims = 0
    for n, group in enumerate(todo, start=1):
        states = reader.read(group.passages, group.claims)
        np.savez(_cached(group), hidden=states.hidden.astype(np.float16), p_yes=states.p_yes)
        claims += len(group.claims)
        spent = time.perf_counter() - started - loaded_s
        print(
            f"{n}/{len(todo)} groups, {claims} claims, {reader.tokens_read} tokens, {spent:.0f} s "
            f"({reader.tokens_read / spent:.1f} tok/s, {spent / claims:.2f} s/claim)",
            flush=True,
        )
        if time.perf_counter() - started > budget_s:
            break
    cost = {
        "split": split,
        "dtype": reader_dtype(),
        "load_s": round(loaded_s, 1),
        "claims": claims,
        "tokens": reader.tokens_read,
        "read_s": round(time.perf_counter() - started - loaded_s, 1),
    }
    with (CACHE / "cost.jsonl").open("a") as log:
        log.write(json.dumps(cost) + "\n")


def _load(groups: list[Group]) -> list[tuple[np.ndarray, np.ndarray]]:
    missing = [g for g in groups if not _cached(g).exists()]
    if missing:
        sys.exit(f"{len(missing)} groups have no states yet: run `bench.probe states` (under the lock) first")
    loaded = []
    for g in groups:
        with np.load(_cached(g)) as z:
            loaded.append((z["hidden"].astype(np.float32), z["p_yes"]))
    return loaded


@dataclass
class Split:
    train_hidden: np.ndarray
    train_p_yes: np.ndarray
    train_labels: np.ndarray
    train_documents: list[str]
    train_hows: list[str]
    answer_hidden: dict[str, np.ndarray]  # item id → sentences × layers × hidden
    answer_p_yes: dict[str, np.ndarray]
    recorded: list[dict[str, Any]]


def load_split(split: str, stride: int = SYNTHETIC_STRIDE, graded: str | None = None, cell: str | None = None) -> Split:
    groups, examples = synthetic_groups(split, stride)
    states = _load(groups)
    rows = [e for g in examples for e in g]
    agroups, positions = answer_groups(split)
    astates = _load(agroups)
    return Split(
        train_hidden=np.concatenate([h for h, _ in states]),
        train_p_yes=np.concatenate([p for _, p in states]),
        train_labels=np.array([int(e.label == SUPPORTED) for e in rows]),
        train_documents=[e.document for e in rows],
        train_hows=[e.how for e in rows],
        answer_hidden={i: np.stack([astates[g][0][k] for g, k in pos]) for i, pos in positions.items()},
        answer_p_yes={i: np.array([astates[g][1][k] for g, k in pos]) for i, pos in positions.items()},
        recorded=rescored(judgements(split, graded), cell) if cell else judgements(split, graded),
    )


def _support(data: Split, probe: Probe | None, layer_index: int | None) -> dict[str, float]:
    """Per item: the least supported sentence's P(supported) (the bare P(Yes) when there is no probe)."""
    support = {}
    for item, hidden in data.answer_hidden.items():
        p_yes = data.answer_p_yes[item]
        if probe is None:
            support[item] = float(p_yes.min())
        else:
            features = feature_matrix(hidden, p_yes, layer_index, probe.with_p_yes)
            support[item] = float(probe.p_supported(features).min())
    return support


def _auc(recorded: list[dict[str, Any]], support: dict[str, float]) -> float:
    wanted = [(j["category"], support[j["id"]]) for j in recorded if j["category"] in CORRECT + FALSE]
    return round(float(roc_auc_score([c in CORRECT for c, _ in wanted], [s for _, s in wanted])), 3)


def _cells(recorded: list[dict[str, Any]], support: dict[str, float], cuts: list[float], veto: str) -> dict[str, Any]:
    graded = [
        j
        for j in recorded
        if all(j["metrics"].get(m, {}).get("score") is not None for m in ("answer_relevance", "groundedness"))
    ]
    cells: dict[str, Any] = {}
    for name, cut in {"judge": None, **{f"judge+{veto}@{c}": c for c in cuts}}.items():
        rows = []
        for j in graded:
            relevance = j["metrics"]["answer_relevance"]["score"]
            groundedness = j["metrics"]["groundedness"]["score"]
            p = support.get(j["id"])
            if cut is not None and p is not None and p < cut:
                groundedness = min(groundedness, 1)
            rows.append((j["category"], j["manual_label"], _verdict(relevance, groundedness)))
        cells[name] = _figures(rows)
    return cells


def _synthetic_auc(data: Split, layer_index: int | None, with_p_yes: bool, c: float) -> float:
    """Held-out documents of the synthetic set (half the documents train, half test): does the head learn at all?"""
    documents = sorted(set(data.train_documents))
    held = set(random.Random(SEED).sample(documents, len(documents) // 2))
    mask = np.array([d in held for d in data.train_documents])
    x = feature_matrix(data.train_hidden, data.train_p_yes, layer_index, with_p_yes)
    probe = train(x[~mask], data.train_labels[~mask], model=DEFAULT_MODEL, layer=None, with_p_yes=with_p_yes, c=c)
    return round(float(roc_auc_score(data.train_labels[mask], probe.p_supported(x[mask]))), 3)


def fit(data: Split, split: str, layer_index: int | None, with_p_yes: bool, c: float) -> Probe:
    x = feature_matrix(data.train_hidden, data.train_p_yes, layer_index, with_p_yes)
    hows: dict[str, int] = defaultdict(int)
    for how in data.train_hows:
        hows[how] += 1
    return train(
        x,
        data.train_labels,
        model=DEFAULT_MODEL,
        layer=None if layer_index is None else LAYERS[layer_index],
        with_p_yes=with_p_yes,
        c=c,
        trained_on={"split_contexts": split, "examples": len(x), "by_how": dict(hows), "seed": SEED, "C": c},
    )


def configurations(cs: list[float]) -> list[tuple[int | None, bool, float]]:
    """(layer index or None, with P(Yes), C): P(Yes) recalibrated alone, then each layer with and without it."""
    return [(None, True, 1.0)] + [(k, p, c) for k in range(len(LAYERS)) for p in (False, True) for c in cs]


def _name(layer_index: int | None, with_p_yes: bool, c: float) -> str:
    layer = "none" if layer_index is None else f"L{LAYERS[layer_index]}"
    return f"{layer}{'+p_yes' if with_p_yes else ''}@C={c}"


def evaluate(
    cuts: tuple[list[float], list[float]],
    cs: list[float],
    chosen: str | None,
    test_cuts: tuple[float, float] | None,
    stride: int,
    graded: dict[str, str] | None = None,
    cell: str | None = None,
    name: str | None = None,
) -> Path:
    """Dev: the bare P(Yes) and every probe configuration; test (once, at dev's choices) when test_cuts is given as
    (the bare P(Yes)'s cut, the probe's cut)."""
    graded = graded or {}
    dev = load_split("dev", stride, graded.get("dev"), cell)
    bare = _support(dev, None, None)
    sweep: dict[str, Any] = {}
    for layer_index, with_p_yes, c in configurations(cs):
        probe = fit(dev, "dev", layer_index, with_p_yes, c)
        sweep[_name(layer_index, with_p_yes, c)] = {
            "synthetic_heldout_auc": _synthetic_auc(dev, layer_index, with_p_yes, c),
            "auc_correct_vs_false": _auc(dev.recorded, _support(dev, probe, layer_index)),
        }
    rows = [[name, v["synthetic_heldout_auc"], v["auc_correct_vs_false"]] for name, v in sweep.items()]
    print(f"dev: bare P(Yes), real AUC correct vs false {_auc(dev.recorded, bare)}")
    print(table(rows, ["dev probe configuration", "synthetic held-out AUC", "real AUC correct vs false"]))
    best = chosen or max(sweep, key=lambda k: sweep[k]["auc_correct_vs_false"])
    layer_index, with_p_yes, c = next(cfg for cfg in configurations(cs) if _name(*cfg) == best)
    probe = fit(dev, "dev", layer_index, with_p_yes, c)
    outcome: dict[str, Any] = {
        "prompt_hash": PROMPT_HASH,
        "layers_read": list(LAYERS),
        "model": DEFAULT_MODEL,
        "reader": f"transformers {version('transformers')}, {reader_dtype()}, CPU",
        "synthetic_stride": stride,
        "judge": {"graded": {split: graded.get(split) or RUNS[split] for split in RUNS}, "cell": cell},
    }
    probe.save(CACHE / "probe-dev.json")  # the artefact (git-ignored: 1,536 weights and a scaler)
    outcome["dev"] = {
        "synthetic_examples": len(dev.train_labels),
        "p_yes": {
            "auc_correct_vs_false": _auc(dev.recorded, bare),
            "cells": _cells(dev.recorded, bare, cuts[0], "p_yes"),
        },
        "probe_sweep": sweep,
        "probe": {
            "chosen": best,
            "version": probe.version,
            "auc_correct_vs_false": sweep[best]["auc_correct_vs_false"],
            "cells": _cells(dev.recorded, _support(dev, probe, layer_index), cuts[1], "probe"),
        },
    }
    _print_cells("dev, bare P(Yes)", outcome["dev"]["p_yes"]["cells"])
    _print_cells(f"dev, probe {best}", outcome["dev"]["probe"]["cells"])
    if test_cuts is not None:
        test = load_split("test", stride, graded.get("test"), cell)
        bare = _support(test, None, None)
        # The same design trained on the other topics (dev's contexts): a probe that never saw the split's corpus.
        from_dev = probe
        probe = fit(test, "test", layer_index, with_p_yes, c)
        support = _support(test, probe, layer_index)
        probe.save(CACHE / "probe-test.json")
        support_from_dev = _support(test, from_dev, layer_index)
        outcome["test"] = {
            "synthetic_examples": len(test.train_labels),
            "p_yes": {
                "cut": test_cuts[0],
                "auc_correct_vs_false": _auc(test.recorded, bare),
                "cells": _cells(test.recorded, bare, [test_cuts[0]], "p_yes"),
            },
            "probe": {
                "chosen": best,
                "cut": test_cuts[1],
                "version": probe.version,
                "auc_correct_vs_false": _auc(test.recorded, support),
                "cells": _cells(test.recorded, support, [test_cuts[1]], "probe"),
            },
            "probe_trained_on_dev": {
                "chosen": best,
                "cut": test_cuts[1],
                "version": from_dev.version,
                "auc_correct_vs_false": _auc(test.recorded, support_from_dev),
                "cells": _cells(test.recorded, support_from_dev, [test_cuts[1]], "probe_from_dev"),
            },
        }
        print(
            f"test AUC correct vs false: bare P(Yes) {outcome['test']['p_yes']['auc_correct_vs_false']}, probe "
            f"{outcome['test']['probe']['auc_correct_vs_false']}"
        )
        _print_cells("test, bare P(Yes)", outcome["test"]["p_yes"]["cells"])
        _print_cells(f"test, probe {best}", outcome["test"]["probe"]["cells"])
        _print_cells(f"test, probe {best} trained on dev's contexts", outcome["test"]["probe_trained_on_dev"]["cells"])
    costs = CACHE / "cost.jsonl"
    outcome["state_reading_runs"] = (
        [json.loads(line) for line in costs.read_text().splitlines()] if costs.exists() else []
    )
    return save(name or ("probe" if test_cuts else "probe_dev"), outcome)


@dataclass(frozen=True)
class EngineReading:
    """One reading of a groundedness prompt's whole-context check by the judge engine: which split and kept grading
    (its items and languages), under which prompt version, in which dtype (auto: the engine's own); `cell` grades the
    kept judgements under that cell's rules when they are read."""

    split: str
    graded: str | None = None
    version: str = ENGINE_VERSION
    dtype: str = "auto"
    cell: str | None = None

    def cache(self, kind: str = "engine") -> Path:
        return CACHE / f"{kind}_{self.split}_{self.version}{'' if self.dtype == 'auto' else '_' + self.dtype}.json"

    def rows(self) -> list[dict[str, Any]]:
        return judgements(self.split, self.graded)

    def recorded(self) -> list[dict[str, Any]]:
        return rescored(self.rows(), self.cell) if self.cell else self.rows()

    def ask(self, asks: list[Any]) -> tuple[dict[str, list[float | None]], dict[str, Any]]:
        """Ask these (key, Ask) pairs of the engine `auto` picks, in one call: each key's P(yes) in order, and what
        ran them (prompt, engine, seconds)."""
        from juiz.judging.backend import build_engine
        from juiz.judging.checks import CHECK_REQUEST, read_check
        from juiz.runtime.settings import Settings

        engine = build_engine(Settings.from_env(None, model=DEFAULT_MODEL, dtype=self.dtype), say=print)
        try:
            began = time.perf_counter()
            replies = engine.generate([a.conversation for _, a in asks], CHECK_REQUEST)
            seconds = time.perf_counter() - began
            origin = dict(engine.origin)
        finally:
            engine.close()
        values: dict[str, list[float | None]] = defaultdict(list)
        for (key, ask), reply in zip(asks, replies, strict=True):
            values[key].append(read_check(ask, reply).p_yes)
        return values, {"prompt": f"groundedness@{self.version}", "engine": origin, "seconds": round(seconds, 1)}

    def keep(self, kind: str, report: dict[str, Any], values: dict[str, list[float | None]], what: str) -> None:
        """Keep one reading's P(yes) per item under CACHE."""
        out = self.cache(kind)
        CACHE.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**report, "p_yes": values}))
        asked = sum(len(v) for v in values.values())
        print(f"{self.split}: {asked} {what} in {report['seconds']:.0f} s on {report['engine'] or 'vllm'} -> {out}")

    def kept(self, kind: str = "engine") -> dict[str, Any]:
        kept: dict[str, Any] = json.loads(self.cache(kind).read_text())
        return kept


def _shown(row: dict[str, Any], version: str) -> tuple[prompts.PromptTemplate, dict[str, str], list[str]] | None:
    """A kept row's groundedness template (in the language it was graded in), fields as the judge shows them, and
    its context segments; None for an item without a context."""
    from juiz.judging.judge import context_segments, shown_context
    from schemas import BatchOptions

    triple = Triple.model_validate(row)
    segments = context_segments(triple.context)
    if not segments:
        return None
    recorded = row["metrics"]["groundedness"]["provenance"]["prompt"]
    template = prompts.load("groundedness", version, prompts.parse_prompt_id(recorded)[2] or "en")
    context = shown_context(triple, segments, BatchOptions().context_chars)
    return template, {"question": triple.question, "answer": triple.answer, "context": context}, segments


def engine_p_yes(reading: EngineReading) -> None:
    """groundedness@VERSION's whole-context check (`stated_by_context`) asked of every answer sentence by the judge
    engine (the product's conversations, as the judge renders them, in each item's language as its kept grading was
    graded), in one call. Per item, each sentence's P(yes), kept under CACHE."""
    from juiz.judging.checks import CheckJob

    asks = []
    for n, row in enumerate(reading.rows()):
        if (shown := _shown(row, reading.version)) is None:
            continue
        template, fields, segments = shown
        job = CheckJob.plan(n, "groundedness", template, fields, segments)
        asks += [(row["id"], a) for a in job.asks(None)[0] if a.check.name == ENGINE_CHECK]
    values, report = reading.ask(asks)
    reading.keep("engine", report, values, "sentences")


def engine_points(reading: EngineReading) -> None:
    """The same whole-context check asked of the judge's own reference points (the kept grading's answer relevance
    reference, one per question), as a baseline for the answer's sentences: what this judge says of statements the
    context does make, on the same context. Per item, each point's P(yes), kept under CACHE (each distinct
    conversation asked once)."""
    from juiz.judging.checks import Ask, reference_points

    unique: dict[str, Ask] = {}
    asked: dict[str, list[str]] = {}
    for row in reading.rows():
        reference = row["metrics"]["answer_relevance"].get("reference")
        if not reference or (shown := _shown(row, reading.version)) is None:
            continue
        template, fields, _ = shown
        check = next(c for c in template.checks if c.name == ENGINE_CHECK)
        asked[row["id"]] = []
        for point in reference_points(reference):
            conversation = template.render_check(check, **fields, sentence=point)
            key = json.dumps(conversation, ensure_ascii=False)
            unique.setdefault(key, Ask(check, point, conversation, ()))
            asked[row["id"]].append(key)
    read, report = reading.ask(list(unique.items()))
    values = {item: [read[key][0] for key in keys] for item, keys in asked.items()}
    reading.keep("engine_points", report, values, "reference points (per item)")


def _weakest(read: dict[str, list[float | None]]) -> dict[str, float]:
    """Per item, its least supported sentence's (or point's) P(yes)."""
    return {item: min((v for v in values if v is not None), default=0.0) for item, values in read.items()}


def baseline_cells(reading: EngineReading, margins: list[float]) -> dict[str, Any]:
    """The whole-context veto read against its baseline: an item is vetoed when its weakest sentence reads more than
    a margin below its weakest reference point (the rule's `baseline` reading), beside the plain cut's reading."""
    sentences, points = reading.kept(), reading.kept("engine_points")
    recorded = reading.recorded()
    weakest = _weakest(sentences["p_yes"])
    base = {i: v for i, v in _weakest(points["p_yes"]).items() if any(points["p_yes"][i])}
    below = {i: weakest[i] - base[i] for i in weakest if i in base}
    outcome = {
        "split": reading.split,
        "prompt": sentences["prompt"],
        "engine": sentences["engine"],
        "engine_s": {"sentences": sentences["seconds"], "points": points["seconds"]},
        "auc_correct_vs_false": {"plain": _auc(recorded, weakest), "against_baseline": _auc(recorded, below)},
        "cells": _cells(recorded, below, [-m for m in margins], "sentence_minus_point"),
    }
    title = f"{reading.split}, {sentences['prompt']}'s stated_by_context against the reference points"
    _print_cells(title, outcome["cells"])
    print(outcome["auc_correct_vs_false"])
    return outcome


def engine_cells(reading: EngineReading, cuts: list[float]) -> dict[str, Any]:
    """The whole-context check read by the engine: AUC and the verdict's figures at each cut, the least supported
    sentence deciding; beside the same question read by transformers (the probe's wording) where `states` has read
    it."""
    kept = reading.kept()
    read: dict[str, list[float | None]] = kept["p_yes"]
    engine = _weakest(read)
    recorded = reading.recorded()
    split = reading.split
    outcome: dict[str, Any] = {
        "split": split,
        "prompt": kept["prompt"],
        "engine": kept["engine"],
        "engine_s": kept["seconds"],
        "sentences": sum(len(v) for v in read.values()),
        "unread": sum(v is None for values in read.values() for v in values),
        "auc_correct_vs_false": {"engine": _auc(recorded, engine)},
    }
    if all(_cached(g).exists() for g in answer_groups(split)[0]):
        data = load_split(split, SYNTHETIC_STRIDE, reading.graded, reading.cell)
        reader = _support(data, None, None)
        pairs = [(reader[i], engine[i]) for i in engine if i in reader]
        outcome["spearman_engine_vs_reader"] = round(
            float(spearmanr([a for a, _ in pairs], [b for _, b in pairs])[0]), 3
        )
        outcome["auc_correct_vs_false"]["reader"] = _auc(recorded, reader)
        outcome["reader"] = _cells(recorded, reader, cuts, "p_yes")
        _print_cells(f"{split}, the probe's question read by transformers", outcome["reader"])
    outcome["engine_cells"] = _cells(recorded, engine, cuts, "engine_p_yes")
    _print_cells(f"{split}, {kept['prompt']}'s stated_by_context read by the engine", outcome["engine_cells"])
    print({k: outcome.get(k) for k in ("spearman_engine_vs_reader", "auc_correct_vs_false", "unread", "engine_s")})
    return outcome


def _print_cells(title: str, cells: dict[str, Any]) -> None:
    print(title + ":")
    print(cells_table(cells))


def _engine_arguments(parser: argparse.ArgumentParser, results: str | None = None) -> None:
    """The arguments of the steps that ask (or read) the whole-context check of the engine; `results`: the default
    results file of a step that writes one."""
    parser.add_argument("--split", required=True, choices=("dev", "test"))
    parser.add_argument("--graded", default="", help="as evaluate's: the kept grading whose items and languages to ask")
    parser.add_argument("--version", default=ENGINE_VERSION, help="the groundedness prompt whose stated_by_context")
    parser.add_argument(
        "--dtype", default="auto", choices=("auto", "bfloat16", "float32"), help="the dtype vLLM runs in"
    )
    if results is not None:
        parser.add_argument("--cell", help="as evaluate's")
        parser.add_argument("--name", help=f"the results file's name (default {results})")


def _graded(text: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in text.split(",") if pair)


def _reading(args: argparse.Namespace) -> EngineReading:
    graded = _graded(args.graded).get(args.split)
    return EngineReading(args.split, graded, args.version, args.dtype, getattr(args, "cell", None))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="step", required=True)
    states = sub.add_parser("states", help="read and cache hidden states (engine: run under the lock)")
    states.add_argument("--split", required=True, help="dev, test or dev,test (in that order)")
    states.add_argument("--budget-s", type=float, default=780.0, help="stop after this long (resumable)")
    asked = sub.add_parser("engine", help="the bare check's P(Yes) asked of the judge engine (run under the lock)")
    _engine_arguments(asked)
    cells = sub.add_parser("engine-cells", help="the bare check read by the engine beside transformers (no engine)")
    _engine_arguments(cells, results="probe_engine_<split>")
    cells.add_argument("--p-yes-cuts", default="0.3,0.35,0.4,0.45,0.5")
    points = sub.add_parser("engine-points", help="the same check asked of the judge's reference points (engine)")
    _engine_arguments(points)
    against = sub.add_parser("baseline-cells", help="the veto read against the reference points (no engine)")
    _engine_arguments(against, results="probe_baseline_<split>")
    against.add_argument("--margins", default="0,0.1,0.2,0.3,0.4")
    ev = sub.add_parser("evaluate", help="fit on synthetic claims, apply to the recorded judgements (no engine)")
    ev.add_argument("--p-yes-cuts", default="0.3,0.35,0.4,0.45,0.5", help="dev: the bare P(Yes)'s cuts swept")
    ev.add_argument("--probe-cuts", default="0.02,0.05,0.08,0.1,0.15,0.2,0.3", help="dev: the probe's cuts swept")
    ev.add_argument("--cs", default="0.001,0.01,0.1", help="dev: the regularisation strengths swept")
    ev.add_argument("--stride", type=int, default=SYNTHETIC_STRIDE, help="train on every n-th passage's claims")
    ev.add_argument("--chosen", help="the probe configuration (default: dev's best real AUC)")
    ev.add_argument(
        "--test", help="P_YES_CUT,PROBE_CUT chosen on dev: also train on test's contexts and report test (once)"
    )
    ev.add_argument(
        "--graded",
        default="",
        help="split=judgements file stem, e.g. dev=dev_checks-13,test=test_checks-14 (default: bench.verifier's runs)",
    )
    ev.add_argument("--cell", help="grade the judgements under this cell's prompts' rules (e.g. checks-14)")
    ev.add_argument("--name", help="the results file's name (default probe, or probe_dev without --test)")
    args = parser.parse_args(argv)
    if args.step == "states":
        read_states(args.split.split(","), args.budget_s)
        return
    if args.step == "engine":
        engine_p_yes(_reading(args))
        return
    if args.step == "engine-points":
        engine_points(_reading(args))
        return
    if args.step == "baseline-cells":
        margins = [float(m) for m in args.margins.split(",")]
        outcome = baseline_cells(_reading(args), margins)
        save(args.name or f"probe_baseline_{args.split}", outcome)
        return
    if args.step == "engine-cells":
        cuts = [float(c) for c in args.p_yes_cuts.split(",")]
        outcome = engine_cells(_reading(args), cuts)
        save(args.name or f"probe_engine_{args.split}", outcome)
        return
    test_cuts = None
    if args.test:
        p_yes_cut, probe_cut = (float(c) for c in args.test.split(","))
        test_cuts = (p_yes_cut, probe_cut)
    evaluate(
        ([float(c) for c in args.p_yes_cuts.split(",")], [float(c) for c in args.probe_cuts.split(",")]),
        [float(c) for c in args.cs.split(",")],
        args.chosen,
        test_cuts,
        args.stride,
        _graded(args.graded),
        args.cell,
        args.name,
    )


if __name__ == "__main__":
    main()
