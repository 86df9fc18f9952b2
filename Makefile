# Two commands: `make run` (the default pipeline) and `make test` (the test suite).
# Both create .venv when it is missing. TORCH_SPEC picks the torch build installed first: the default
# torch==2.13.0 resolves to the CPU build on machines that carry it; see docs/scaling.md for CUDA builds.

PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY         := $(VENV)/bin/python
PIP        := $(PY) -m pip --disable-pip-version-check -q
export GX_ANALYTICS_ENABLED      := false
export BENTOML_DO_NOT_TRACK      := True
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export HF_HUB_DISABLE_TELEMETRY  := 1

.PHONY: run test test-unit test-integration ui clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)

# Stamps record what was installed; they are redone when pyproject.toml changes.
$(VENV)/.installed-run: pyproject.toml | $(PY)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install $(TORCH_SPEC)
	$(PIP) install -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed-run
	$(PIP) install -e ".[dev]"
	touch $@

# `make run` is `dvc repro`: the root's dvc.yaml, the product's pipeline (experiments/compare/dvc.yaml, the
# objective comparison, is not its target). PROFILE=gpu applies profiles/gpu.yaml for that run only
# (stages.profile_run): its params.yaml, dvc.lock and reports go to reports/profiles/gpu/ and the workspace's are
# put back, so the next plain `make run` runs the default pipeline. PROFILE="gpu gpu-quick" applies both, the later
# over the earlier; a profile that names comparison runs (PROFILE=compare) runs both DVC project files.
PROFILE ?=

run: $(VENV)/.installed-run
	@test -d .dvc || (echo "not a DVC project: run from the repository root" && exit 1)
	$(PY) -m stages.config params.yaml   # one line for a params file DVC would choke on (alias bombs, NaN)
ifeq ($(PROFILE),)
	$(PY) -m stages.profile_run --restore   # what a killed profile run left in the workspace, put back
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/dvc repro
else
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m stages.profile_run $(PROFILE)
endif

# A local Prefect server (SQLite under .prefect/) and the scheduled deployment of the pipeline flow;
# the UI is at http://127.0.0.1:$(UI_PORT). CRON, UI_PROFILE, UI_TARGET, UI_DASK (a Dask scheduler address),
# UI_SCRATCH (an fsspec URL for cleaning's shards) and UI_TRAIN_PROCESSES set the deployment's schedule and
# default parameters.
UI_PORT    ?= 4200
CRON       ?= 0 3 * * *
ui: $(VENV)/.installed-run
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m flows.ui --port $(UI_PORT) --cron "$(CRON)" \
		$(if $(UI_PROFILE),--profile $(UI_PROFILE)) $(if $(UI_TARGET),--target $(UI_TARGET)) \
		$(if $(UI_DASK),--dask $(UI_DASK)) $(if $(UI_SCRATCH),--scratch $(UI_SCRATCH)) \
		$(if $(UI_TRAIN_PROCESSES),--train-processes $(UI_TRAIN_PROCESSES))

test: $(VENV)/.installed-dev  # --durations: the slowest tests, named in CI's log
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest tests --durations=40

test-unit: $(VENV)/.installed-dev
	$(PY) -m pytest tests/unit

test-integration: $(VENV)/.installed-dev
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest tests/integration -m integration

clean-venv:
	rm -rf $(VENV)
