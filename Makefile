# kernelcast -- `make help` lists the targets. Every target creates the venv on first use.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DO_NOT_TRACK=1 DVC_NO_ANALYTICS=1 RAY_USAGE_STATS_ENABLED=0 MLFLOW_DISABLE_TELEMETRY=true \
       PREFECT_SERVER_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1

.PHONY: help install hip-compiler pipeline test test-fast lint bench mlflow-ui clean-state

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): requirements.lock pyproject.toml infra/install_lock.py
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (kernelcast needs Python 3.11)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	# The lock, the project (editable) and the embedded LLM's wheel, by a pinned uv (pip where uv cannot run).
	$(PY) infra/install_lock.py $(VENV)
	@$(MAKE) --no-print-directory hip-compiler
	touch $@

install: $(STAMP) ## create .venv and install pinned dependencies (once)

# HIP static analysis compiles with Debian's ROCm packages (clang 15); best effort, never fails the install.
hip-compiler: ## install the HIP compiler (hipcc, rocm-device-libs) where apt-get and root allow
	@if command -v hipcc >/dev/null && [ -f /usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ockl.bc ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hipcc rocm-device-libs >/dev/null; } \
	  || echo "note: apt-get could not install hipcc rocm-device-libs; HIP questions will say so, all else works"; \
	else echo "note: no HIP compiler (needs apt-get as root: apt-get install hipcc rocm-device-libs); HIP questions will say so"; fi

pipeline: $(STAMP) hip-compiler ## run the whole pipeline on the embedded defaults and the bundled datasets
	$(VENV)/bin/kernelcast pipeline

test: $(STAMP) hip-compiler ## run the whole test suite (unit, data, model, slow integration on real services)
	$(PY) -m pytest -q

test-fast: $(STAMP) hip-compiler ## unit + data tests only (no slow integration)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP) ## ruff check (rules in pyproject.toml) and ruff format --check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP) ## accuracy table vs published numbers
	$(VENV)/bin/kernelcast bench accuracy

mlflow-ui: $(STAMP) ## open the MLflow UI on http://127.0.0.1:5000
	$(VENV)/bin/kernelcast mlflow-ui

clean-state: ## delete this installation's state folder (.kernelcast/)
	rm -rf .kernelcast
