"""On paper: judgements/s for a 7–8B judge on one H100 and on 8 workers × 8 H100s, from the token counts measured here.

No GPU runs here: this is roofline arithmetic with published hardware figures, fed with the prompt, cached-prompt
and output tokens per judgement that bench/engine_efficiency.py and bench/prefix_caching.py measured (falling back
to the figures in bench/README.md when their JSON is absent). bench/README.md explains every constant.

    .venv/bin/python -m bench.on_paper
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bench.common import results_dir, save, table

# NVIDIA H100 SXM5 80 GB datasheet: 989 TFLOP/s dense BF16 (1,979 with sparsity), 3.35 TB/s HBM3.
H100_BF16_FLOPS = 989e12
H100_HBM_BYTES_S = 3.35e12
H100_MEMORY_BYTES = 80e9
# Llama-3.1-8B: 8.03e9 parameters, 32 layers, d_model 4096, 8 KV heads × 128 dims (GQA), bf16.
PARAMS = 8.03e9
LAYERS, D_MODEL, KV_HEADS, HEAD_DIM = 32, 4096, 8, 128
WEIGHT_BYTES = PARAMS * 2
KV_BYTES_PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * 2  # K and V, bf16: 131,072 B
# Assumptions (README): model FLOPs utilisation in prefill-heavy batches, and achieved share of HBM bandwidth.
MFU = (0.4, 0.6)
BANDWIDTH_EFFICIENCY = 0.8
BATCH = 256  # sequences decoding together (juiz's coalesce_max_items)
WORKERS, GPUS_PER_WORKER = 8, 8

# Used when this machine's JSON is missing: juiz-1 CoT on the development judge (Qwen2.5 tokenizer), N = 64, measured
# here: prompt tokens, the share a prefix cache served within the batch (the system prompt), output tokens.
FALLBACK = {"prompt": 594.8, "cached_share": 0.625, "output": 42.5, "fast_prompt": 563.0}


@dataclass(frozen=True)
class Workload:
    name: str
    prompt: float  # prompt tokens per judgement
    cached: float  # of which served from the prefix cache (no prefill FLOPs)
    output: float  # generated tokens per judgement


def flops_per_token(context: float) -> float:
    """2 × parameters for the matmuls, plus attention over `context` earlier tokens (QKᵀ and AV)."""
    return 2 * PARAMS + 4 * LAYERS * D_MODEL * context


def per_judgement_seconds(w: Workload, mfu: float) -> dict[str, float]:
    """Compute time (prefill of the uncached prompt + every generated token) and decode memory time (weights read
    once per step and shared by BATCH sequences, plus each sequence's own KV cache read every step)."""
    context = w.prompt + w.output / 2
    compute = (w.prompt - w.cached + w.output) * flops_per_token(context) / (mfu * H100_BF16_FLOPS)
    step_bytes_per_sequence = WEIGHT_BYTES / BATCH + context * KV_BYTES_PER_TOKEN
    memory = w.output * step_bytes_per_sequence / (BANDWIDTH_EFFICIENCY * H100_HBM_BYTES_S)
    return {"compute_s": compute, "memory_s": memory}


def estimate(w: Workload) -> dict[str, Any]:
    """Range over MFU: the low end adds compute and memory time (no overlap), the high end takes the larger."""
    low = per_judgement_seconds(w, MFU[0])
    high = per_judgement_seconds(w, MFU[1])
    one_gpu = (1 / (low["compute_s"] + low["memory_s"]), 1 / max(high["compute_s"], high["memory_s"]))
    return {
        "workload": w.__dict__,
        "compute_ms_per_judgement": [round(low["compute_s"] * 1e3, 2), round(high["compute_s"] * 1e3, 2)],
        "decode_memory_ms_per_judgement": round(low["memory_s"] * 1e3, 2),
        "bound": "prefill/compute" if high["compute_s"] > high["memory_s"] else "decode/memory bandwidth",
        "one_h100_judgements_per_s": [round(x) for x in one_gpu],
        "cluster_judgements_per_s": [round(x * WORKERS * GPUS_PER_WORKER) for x in one_gpu],
    }


def measured() -> dict[str, Any]:
    """Tokens per judgement from this machine's runs: engine_efficiency (largest N: prompt, output, and the share of
    the prompt a fresh prefix cache served within the batch, i.e. the shared system prompt) and prefix_caching
    (the fast mode's prompt), taken only when both ran on the same model."""
    figures: dict[str, Any] = dict(FALLBACK)
    sources = []
    model = None
    ee = results_dir() / "engine_efficiency.json"
    if ee.exists():
        data = json.loads(ee.read_text(encoding="utf-8"))
        model, sizes = data["model"], data["sizes"]
        largest = max(sizes, key=int)
        tokens = sizes[largest]["tokens"]
        figures["prompt"], figures["output"] = tokens["prompt_tokens_mean"], tokens["output_tokens_mean"]
        figures["cached_share"] = round(tokens["cached_prompt_tokens_mean"] / tokens["prompt_tokens_mean"], 3)
        sources.append(f"engine_efficiency.json ({model}, N={largest})")
    pc = results_dir() / "prefix_caching.json"
    if pc.exists():
        data = json.loads(pc.read_text(encoding="utf-8"))
        if "fast" in data["modes"] and model in (None, data["model"]):
            figures["fast_prompt"] = data["modes"]["fast"]["first"]["prompt_tokens_mean"]
            sources.append("prefix_caching.json (fast prompt)")
    figures["sources"] = ", ".join(sources) or "the fallback figures (no measured JSON)"
    return figures


def main() -> dict[str, Any]:
    m = measured()
    share = float(m["cached_share"])
    workloads = [
        Workload("cot, system prompt cached", m["prompt"], share * m["prompt"], m["output"]),
        Workload("cot, no prefix cache", m["prompt"], 0.0, m["output"]),
        Workload("fast, system prompt cached", m["fast_prompt"], share * m["fast_prompt"], 1.0),
    ]
    estimates = [estimate(w) for w in workloads]
    print(f"\nOn paper — 8B judge, bf16, H100 SXM; tokens per judgement from {m['sources']}")
    rows = [
        [
            e["workload"]["name"],
            f"{e['workload']['prompt']:.0f} ({e['workload']['cached']:.0f} cached)",
            f"{e['workload']['output']:.0f}",
            "–".join(str(x) for x in e["compute_ms_per_judgement"]),
            e["decode_memory_ms_per_judgement"],
            e["bound"],
            "–".join(str(x) for x in e["one_h100_judgements_per_s"]),
            "–".join(str(x) for x in e["cluster_judgements_per_s"]),
        ]
        for e in estimates
    ]
    header = ["workload", "prompt tok", "out tok", "compute ms", "decode mem ms", "limit", "1 H100 j/s", "64 H100 j/s"]
    print(table(rows, header))
    payload = {
        "inputs": m,
        "assumptions": {"mfu": MFU, "bandwidth_efficiency": BANDWIDTH_EFFICIENCY, "batch": BATCH},
        "estimates": estimates,
    }
    print(f"written: {save('on_paper', payload)}")
    return payload


if __name__ == "__main__":
    main()
