"""Who reads the probe's hidden state: transformers, vLLM's pooling runner, or llama.cpp's embeddings (cost and gain).

The probe verifier (juiz.judging.probe) reads the judge model's hidden state at the end of a yes/no check
conversation. Today `juiz train --probe` and `--verifier` read it with transformers, a second runtime beside the
engine. A serving engine can return one state itself: the last layer's, after the final norm, at the last prompt
token ("LAST" pooling), which is what vLLM's pooling runner and llama.cpp's embeddings give. This benchmark reads the
same check conversations (a split's synthetic claims, one passage group in `--stride`, and every sentence of every
recorded answer beside its item's context) with each reader, one after another in one run, and reports:

- cost: load seconds, prompt tokens, seconds per claim (vLLM and transformers reuse a group's shared prefix;
  llama.cpp's server computes every embedding prompt whole);
- fidelity: the cosine of each engine's state with transformers' last-layer state for the same claim;
- gain: the AUC, correct against false answers, of the answer's least supported sentence, for the bare check
  (P(Yes), read from the state and the model's output rows for "Yes" and "No"), for a last-layer probe trained on the
  split's synthetic claims (no labels), and for the shipped probe's layer 20 (transformers only).

    flock /tmp/juiz-heavy.lock .venv/bin/python -m bench.probe_readers run --split dev

llama.cpp reads `--llamacpp-every` groups in so many (its prompts are computed whole: ~1,000 tokens a sentence);
its gain is then read through its fidelity to the others on the claims it read.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from bench.common import WORK, save, setup_logging, table
from bench.probe import (
    SEED,
    SYNTHETIC_STRIDE,
    Group,
    _auc,
    answer_groups,
    judgements,
    reader_dtype,
    synthetic_groups,
)
from juiz.engines.models import DEFAULT_MODEL, find_gguf, resolve_model
from juiz.judging.probe import DEFAULT_C, SYSTEM, USER_PREFIX, USER_SUFFIX, render_context, train
from juiz.judging.synthetic import SUPPORTED, Example

READERS = ("transformers", "vllm", "llamacpp")
CACHE = WORK / "probe_readers"
SHIPPED_LAYER = 20  # the layer `juiz train --probe` reads (transformers only: engines pool the last one)
LAST_LAYER = 28  # Qwen2.5-1.5B's last, after the final norm: what LAST pooling returns
LLAMACPP_EVERY = 6  # one group in so many for llama.cpp, whose embedding prompts share nothing


def groups_of(split: str, stride: int) -> list[Group]:
    """The split's answer groups, then its synthetic groups (bench.probe's grouping)."""
    return answer_groups(split)[0] + synthetic_groups(split, stride)[0]


def check_texts(tokenizer: Any, group: Group) -> list[str]:
    """Each claim's whole check conversation as the chat template writes it, ready for generation."""
    context = render_context(group.passages)
    return [
        str(
            tokenizer.apply_chat_template(
                [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": USER_PREFIX.format(context=context) + USER_SUFFIX.format(claim=c)},
                ],
                tokenize=False,
                add_generation_prompt=True,
            )
        )
        for c in group.claims
    ]


def prompt_tokens(tokenizer: Any, group: Group) -> int:
    """The group's check conversations' tokens, each counted whole (what a reader without a prefix cache computes)."""
    return sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in check_texts(tokenizer, group))


def yes_no_rows(model_path: str, tokenizer: Any) -> np.ndarray:
    """The output layer's rows for "Yes" and "No": a last-layer state times their difference is the check's log-odds."""
    from safetensors import safe_open

    ids = [tokenizer.encode(w, add_special_tokens=False)[0] for w in ("Yes", "No")]
    with safe_open(str(Path(model_path) / "model.safetensors"), "pt") as weights:  # "np" has no bfloat16
        names = set(weights.keys())  # a safetensors handle has no `in`
        rows = weights.get_slice("lm_head.weight" if "lm_head.weight" in names else "model.embed_tokens.weight")
        return np.stack([rows[i : i + 1][0].float().numpy() for i in ids])


class TransformersReader:
    """juiz's own StateReader: the shipped layer and the last, P(Yes) from the model's logits."""

    def __init__(self, model_path: str) -> None:
        from juiz.judging.probe import StateReader

        self.dtype = reader_dtype()
        self.reader = StateReader(model_path, (SHIPPED_LAYER, LAST_LAYER), dtype=self.dtype)

    def read(self, group: Group) -> tuple[np.ndarray, int, int]:
        before = self.reader.tokens_read
        states = self.reader.read(group.passages, group.claims)
        return states.hidden, prompt_tokens(self.reader.tokenizer, group), self.reader.tokens_read - before

    def close(self) -> None:
        pass


class VllmPoolingReader:
    """vLLM's pooling runner with LAST pooling and prefix caching: a group's first claim computes the shared prefix,
    the rest are sent together and reuse it."""

    def __init__(self, model_path: str, tokenizer: Any) -> None:
        from vllm import LLM
        from vllm.config import PoolerConfig

        from juiz.engines.vllm_engine import CPU_BLOCK_SIZE, cpu_defaults, cpu_dtype

        cpu_defaults()
        dtype: Any = cpu_dtype("auto") or "auto"  # vLLM types it as a literal
        self.tokenizer = tokenizer
        self.llm = LLM(
            model=model_path,
            runner="pooling",
            pooler_config=PoolerConfig(seq_pooling_type="LAST", use_activation=False),
            enable_prefix_caching=True,
            block_size=CPU_BLOCK_SIZE,
            max_model_len=4096,
            dtype=dtype,
            seed=SEED,
        )
        self.dtype = str(self.llm.llm_engine.model_config.dtype).removeprefix("torch.")

    def read(self, group: Group) -> tuple[np.ndarray, int, int]:
        texts = check_texts(self.tokenizer, group)
        outputs = self.llm.embed(texts[:1], use_tqdm=False) + (
            self.llm.embed(texts[1:], use_tqdm=False) if len(texts) > 1 else []
        )
        prompt = sum(len(o.prompt_token_ids) for o in outputs)
        cached = sum(o.num_cached_tokens or 0 for o in outputs)
        hidden = np.array([o.outputs.embedding for o in outputs], dtype=np.float32)[:, None, :]
        return hidden, prompt, prompt - cached

    def close(self) -> None:
        del self.llm


class LlamaCppEmbeddingReader:
    """llama.cpp's server on the GGUF as shipped, in embedding mode with LAST pooling, unnormalised; one claim a
    request (its server recomputes every embedding prompt whole)."""

    def __init__(self, gguf: Path, tokenizer: Any) -> None:
        import httpx
        import xllamacpp

        from juiz.engines.llamacpp_engine import common_params, server_config

        params = common_params(server_config(gguf, DEFAULT_MODEL, max_model_len=4096, slots=1))
        params.embedding = True
        params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_LAST
        params.embd_normalize = -1
        params.n_batch = params.n_ubatch = 4096  # an embedding prompt is computed in one step
        self.dtype = "GGUF as shipped"
        self.server = xllamacpp.Server(params)
        self.client = httpx.Client(base_url=str(self.server.listening_address), timeout=3600)
        self.tokenizer = tokenizer

    def read(self, group: Group) -> tuple[np.ndarray, int, int]:
        rows = []
        for text in check_texts(self.tokenizer, group):
            reply = self.client.post("/embedding", json={"content": text})
            reply.raise_for_status()
            rows.append(np.array(reply.json()[0]["embedding"], dtype=np.float32).reshape(-1))
        prompt = prompt_tokens(self.tokenizer, group)
        return np.stack(rows)[:, None, :], prompt, prompt

    def close(self) -> None:
        self.client.close()


def _cache(reader: str, split: str) -> Path:
    return CACHE / reader / split


def read(reader_name: str, split: str, stride: int, every: int) -> None:
    """Read the split's groups (one in `every`) with one reader; states and costs kept under bench/work."""
    from transformers import AutoTokenizer

    model_path = resolve_model(DEFAULT_MODEL)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    groups = groups_of(split, stride)[::every]
    started = time.perf_counter()
    reader: Any
    if reader_name == "transformers":
        reader = TransformersReader(model_path)
    elif reader_name == "vllm":
        reader = VllmPoolingReader(model_path, tokenizer)
    else:
        gguf = find_gguf(DEFAULT_MODEL)
        if gguf is None:
            sys.exit(f"no GGUF for {DEFAULT_MODEL}: run `juiz models pull`")
        reader = LlamaCppEmbeddingReader(gguf, tokenizer)
    load_s = time.perf_counter() - started
    out = _cache(reader_name, split)
    out.mkdir(parents=True, exist_ok=True)
    claims = prompt = computed = 0
    started = time.perf_counter()
    for n, group in enumerate(groups, start=1):
        hidden, group_prompt, group_computed = reader.read(group)
        np.save(out / f"{group.key}.npy", hidden.astype(np.float32))
        claims += len(group.claims)
        prompt += group_prompt
        computed += group_computed
        spent = time.perf_counter() - started
        print(f"{reader_name} {split}: {n}/{len(groups)} groups, {claims} claims, {spent:.0f} s", flush=True)
    read_s = time.perf_counter() - started
    reader.close()
    cost = {
        "reader": reader_name,
        "dtype": reader.dtype,
        "groups": len(groups),
        "every": every,
        "load_s": round(load_s, 1),
        "read_s": round(read_s, 1),
        "claims": claims,
        "prompt_tokens": prompt,
        "computed_tokens": computed,
        "s_per_claim": round(read_s / claims, 3),
        "computed_tokens_per_s": round(computed / read_s, 1),
    }
    (out / "cost.json").write_text(json.dumps(cost, indent=2) + "\n")
    print(json.dumps(cost), flush=True)


def _states(reader: str, split: str, groups: Sequence[Group]) -> list[np.ndarray | None]:
    paths = [_cache(reader, split) / f"{g.key}.npy" for g in groups]
    return [np.load(p) if p.exists() else None for p in paths]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


def compare(split: str, stride: int) -> Path:
    """Cost, fidelity and gain of every reader that has read the split, as one table and bench/results JSON."""
    from transformers import AutoTokenizer

    model_path = resolve_model(DEFAULT_MODEL)
    rows_yes_no = yes_no_rows(model_path, AutoTokenizer.from_pretrained(model_path))
    direction = rows_yes_no[0] - rows_yes_no[1]
    agroups, positions = answer_groups(split)
    sgroups, examples = synthetic_groups(split, stride)
    groups = agroups + sgroups
    rows = [e for group in examples for e in group]
    labels = [int(e.label == SUPPORTED) for e in rows]
    recorded = judgements(split)
    base = _states("transformers", split, groups)
    if any(s is None for s in base):
        sys.exit("transformers has not read every group: run `read --reader transformers` first")
    base_last = [s[:, 1] for s in base if s is not None]
    shipped = [s[:, 0] for s in base if s is not None]
    report: dict[str, Any] = {"split": split, "stride": stride, "model": DEFAULT_MODEL, "readers": {}}
    for name in READERS:
        cost_path = _cache(name, split) / "cost.json"
        if not cost_path.exists():
            continue
        states = base if name == "transformers" else _states(name, split, groups)
        read_groups = [k for k, s in enumerate(states) if s is not None]
        mine = {k: (s[:, 1] if name == "transformers" else s[:, 0]) for k, s in enumerate(states) if s is not None}
        # One flat row per reader (cost, fidelity, then gain or agreement): the results page shows it whole.
        entry: dict[str, Any] = json.loads(cost_path.read_text())
        cos = np.concatenate([_cosines(mine[k], base_last[k]) for k in read_groups])
        entry["cosine_to_transformers_median"] = round(float(np.median(cos)), 5)
        entry["cosine_to_transformers_min"] = round(float(cos.min()), 5)
        if len(read_groups) == len(groups):
            gain = _gain(
                mine, shipped if name == "transformers" else None, agroups, positions, labels, recorded, direction
            )
            entry.update({f"auc_{k}": v for k, v in gain.items()})
        else:
            agreement = _agreement(mine, base_last, read_groups, agroups, labels, direction)
            entry.update({f"on_its_claims_{k}": v for k, v in agreement.items()})
        report["readers"][name] = entry
    report["held_out_topic"] = {
        f"probe_layer_{layer}": held_out_topics(states, agroups, positions, rows, labels, recorded)
        for layer, states in ((SHIPPED_LAYER, shipped), (LAST_LAYER, base_last))
    }
    _print(report)
    return save(f"probe_readers_{split}", report)


def _answer_support(per_group: dict[int, np.ndarray], positions: dict[str, list[tuple[int, int]]]) -> dict[str, float]:
    return {item: float(min(per_group[g][k] for g, k in pos)) for item, pos in positions.items() if pos}


def _log_odds(hidden: np.ndarray, direction: np.ndarray) -> np.ndarray:
    return np.asarray(hidden @ direction)


def _fit(x: np.ndarray, labels: list[int]) -> Any:
    return train(x, labels, model=DEFAULT_MODEL, layer=None, with_p_yes=False, c=DEFAULT_C)


def _gain(
    last: dict[int, np.ndarray],
    shipped: list[np.ndarray] | None,
    agroups: Sequence[Group],
    positions: dict[str, list[tuple[int, int]]],
    labels: list[int],
    recorded: list[dict[str, Any]],
    direction: np.ndarray,
) -> dict[str, float]:
    """AUC correct vs false answers: bare check, last-layer probe (+ its log-odds), and the shipped layer."""
    n_answer = len(agroups)
    synthetic = np.concatenate([last[k] for k in range(n_answer, len(last))])
    odds = {k: _log_odds(h, direction) for k, h in last.items()}
    gain = {"bare_check": _auc(recorded, _answer_support({k: odds[k] for k in range(n_answer)}, positions))}
    probe = _fit(synthetic, labels)
    gain["probe_last_layer"] = _auc(
        recorded, _answer_support({k: probe.p_supported(last[k]) for k in range(n_answer)}, positions)
    )
    with_odds = np.concatenate([synthetic, np.concatenate([odds[k] for k in range(n_answer, len(last))])[:, None]], 1)
    probe = _fit(with_odds, labels)
    gain["probe_last_layer+log_odds"] = _auc(
        recorded,
        _answer_support(
            {k: probe.p_supported(np.concatenate([last[k], odds[k][:, None]], 1)) for k in range(n_answer)}, positions
        ),
    )
    if shipped is not None:
        probe = _fit(np.concatenate(shipped[n_answer:]), labels)
        gain[f"probe_layer_{SHIPPED_LAYER}"] = _auc(
            recorded, _answer_support({k: probe.p_supported(shipped[k]) for k in range(n_answer)}, positions)
        )
    return gain


def held_out_topics(
    per_group: Sequence[np.ndarray],
    agroups: Sequence[Group],
    positions: dict[str, list[tuple[int, int]]],
    examples: Sequence[Example],
    labels: list[int],
    recorded: list[dict[str, Any]],
) -> dict[str, Any]:
    """A corpus the probe has not seen: each topic's answers read by a probe trained on the synthetic claims of every
    other topic's contexts (leave one topic out), against the probe trained on all of the split's contexts."""
    topic_of_item = {j["id"]: j["topic"] for j in recorded}
    topic_of_document = {s.get("source") or j["id"]: j["topic"] for j in recorded for s in j["context"] or []}
    n_answer = len(agroups)
    synthetic = np.concatenate(per_group[n_answer:])
    topics = np.array([topic_of_document[e.document] for e in examples])
    y = np.array(labels)
    answers = dict(enumerate(per_group[:n_answer]))
    support = _answer_support({k: _fit(synthetic, labels).p_supported(h) for k, h in answers.items()}, positions)
    held: dict[str, float] = {}
    for topic in sorted({topic_of_item[i] for i in positions}):
        keep = topics != topic
        probe = _fit(synthetic[keep], y[keep].tolist())
        mine = {i: pos for i, pos in positions.items() if topic_of_item[i] == topic}
        held.update(_answer_support({k: probe.p_supported(h) for k, h in answers.items()}, mine))
    return {
        "topics": len({topic_of_item[i] for i in positions}),
        "trained_on_every_topic": _auc(recorded, support),
        "topic_held_out": _auc(recorded, held),
    }


def _agreement(
    mine: dict[int, np.ndarray],
    base: list[np.ndarray],
    read_groups: list[int],
    agroups: Sequence[Group],
    labels: list[int],
    direction: np.ndarray,
) -> dict[str, float]:
    """On the claims this reader read: the transformers-trained last-layer probe's P(supported), and the bare
    check's log-odds, from this reader's states against transformers' (Spearman)."""
    n_answer = len(agroups)
    probe = _fit(np.concatenate(base[n_answer:]), labels)
    ours = np.concatenate([probe.p_supported(mine[k]) for k in read_groups])
    theirs = np.concatenate([probe.p_supported(base[k]) for k in read_groups])
    odds_ours = np.concatenate([_log_odds(mine[k], direction) for k in read_groups])
    odds_theirs = np.concatenate([_log_odds(base[k], direction) for k in read_groups])
    return {
        "claims": len(ours),
        "probe_spearman": round(float(spearmanr(ours, theirs).statistic), 4),
        "probe_mean_abs_difference": round(float(np.abs(ours - theirs).mean()), 4),
        "bare_check_spearman": round(float(spearmanr(odds_ours, odds_theirs).statistic), 4),
    }


def _print(report: dict[str, Any]) -> None:
    rows = []
    for name, entry in report["readers"].items():
        rows.append(
            [
                name,
                entry["dtype"],
                entry["load_s"],
                entry["claims"],
                entry["computed_tokens"],
                entry["s_per_claim"],
                entry["cosine_to_transformers_median"],
                entry.get("auc_bare_check"),
                entry.get("auc_probe_last_layer"),
                entry.get(f"auc_probe_layer_{SHIPPED_LAYER}"),
                entry.get("on_its_claims_probe_spearman"),
            ]
        )
    header = [
        "reader",
        "dtype",
        "load s",
        "claims",
        "computed tokens",
        "s/claim",
        "cos vs tf L28",
        "AUC bare",
        "AUC probe L28",
        f"AUC probe L{SHIPPED_LAYER}",
        "probe ρ vs tf",
    ]
    print(table(rows, header))
    for probe, figures in report["held_out_topic"].items():
        print(
            f"{probe}: AUC trained on every topic {figures['trained_on_every_topic']}, "
            f"the item's topic held out {figures['topic_held_out']} ({figures['topics']} topics)"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.probe_readers", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("read", "compare", "run"):
        each = sub.add_parser(command)
        each.add_argument("--split", default="dev")
        each.add_argument("--stride", type=int, default=SYNTHETIC_STRIDE)
        if command == "read":
            each.add_argument("--reader", choices=READERS, required=True)
        if command in ("read", "run"):
            each.add_argument("--llamacpp-every", type=int, default=LLAMACPP_EVERY)
    args = parser.parse_args(argv)
    setup_logging()
    if args.command == "read":
        read(args.reader, args.split, args.stride, args.llamacpp_every if args.reader == "llamacpp" else 1)
    elif args.command == "run":
        for reader in READERS:  # one engine at a time, each in its own process
            reading = [
                sys.executable,
                "-m",
                "bench.probe_readers",
                "read",
                "--reader",
                reader,
                "--split",
                args.split,
                "--stride",
                str(args.stride),
                "--llamacpp-every",
                str(args.llamacpp_every),
            ]
            subprocess.run(reading, check=True)
    if args.command in ("compare", "run"):
        print(compare(args.split, args.stride))


if __name__ == "__main__":
    main()
