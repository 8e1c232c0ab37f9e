"""What the CPU can do, as Linux reports it: the flags that decide a CPU engine's dtype and which engine runs."""

from __future__ import annotations

from pathlib import Path

# x86 instructions that compute in bfloat16 natively. Without them vLLM's CPU kernels emulate bf16 (AVX2, or AVX-512
# without BF16), and a bf16 model runs several times slower than the same model in float32 (bench/cpu_dtype.py).
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux reports them (empty where /proc/cpuinfo can't be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    return frozenset(
        flag for line in text.splitlines() if line.startswith("flags") for flag in line.partition(":")[2].split()
    )


def native_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX512-BF16 or AMX)."""
    return bool(NATIVE_BF16_FLAGS & cpu_flags())


# x86's 512-bit vector instructions. vLLM's CPU kernels (oneDNN) use them in float32 as in bf16; on such a CPU without
# native bf16, vLLM float32 graded faster than llama.cpp's Q4 kernels (bench.engines); on an AVX2-only CPU, slower.
AVX512_FLAG = "avx512f"


def avx512() -> bool:
    """Whether this CPU has AVX-512 (its foundation instructions)."""
    return AVX512_FLAG in cpu_flags()
