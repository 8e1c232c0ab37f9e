"""The CPU engine's dtype: float32 where the CPU would emulate bf16, the model's own where it computes bf16 natively
(bench/cpu_dtype.py measures the difference), and always what the operator set (`JUIZ_DTYPE`)."""

from __future__ import annotations

import pytest

from juiz.engines.vllm_engine import cpu_dtype, engine_dtype
from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings

AVX2 = frozenset({"avx", "avx2", "fma"})


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (AVX2, "float32"),  # AMD EPYC without AVX-512 (this project's machines, some days)
        (AVX2 | {"avx512f", "avx512bw"}, "float32"),  # AVX-512 without BF16: bf16 is still emulated
        (AVX2 | {"avx512f", "avx512_bf16"}, None),  # Zen 4, Cooper Lake: native bf16, the model's own dtype
        (AVX2 | {"amx_bf16", "amx_tile"}, None),  # Sapphire Rapids
    ],
)
def test_auto_runs_float32_only_where_bf16_would_be_emulated(flags: frozenset[str], expected: str | None) -> None:
    assert cpu_dtype("auto", machine="x86_64", flags=flags) == expected


def test_auto_leaves_other_architectures_to_vllm() -> None:
    assert cpu_dtype("auto", machine="aarch64", flags=frozenset()) is None


def test_the_operator_wins() -> None:
    assert cpu_dtype("bfloat16", machine="x86_64", flags=AVX2) == "bfloat16"
    assert cpu_dtype("float32", machine="x86_64", flags=AVX2 | {"amx_bf16"}) == "float32"


def test_the_setting_names_the_wrong_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUIZ_DTYPE", "fp8")
    with pytest.raises(InputError) as raised:
        Settings.from_env()
    assert raised.value.source == "JUIZ_DTYPE"


def test_a_gpu_runs_the_models_own_dtype_unless_the_operator_says() -> None:
    assert engine_dtype("auto", on_gpu=True) is None
    assert engine_dtype("float16", on_gpu=True) == "float16"
