# kdakit: `make help` lists every target and its variables.
# Area targets live beside their code (images/images.mk, playbooks/playbooks.mk, kernels/kernels.mk, ...)
# and are included below.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
KDAKIT := $(VENV)/bin/kdakit
WHEELS ?= .cache/wheels
# Read a pin from pins.toml (the one source of truth), e.g. $(call pin,packages,sglang)
pin = $(shell $(PYTHON) kdakit/facts/pins.py $(1) $(2))
SGLANG_VERSION := $(call pin,packages,sglang)
SGL_EVAL_VERSION := $(call pin,packages,sgl-eval)
EXTRAS ?= dev,kernels,eval,controller,sglang-cli,sglang-backend,benchclient

# The SKU registry (kdakit/facts/profiles/<sku>.toml): every SKU, and the one used when SKU= is not given.
SKUS := $(shell $(PYTHON) -m kdakit.facts.profiles names)
SKU ?= $(shell $(PYTHON) -m kdakit.facts.profiles default)
ARM ?= helion
SET ?=
PYTEST_ARGS ?=
# Workers of `make test` (pytest-xdist): the CPU count, at most 4 (each imports torch; much of the suite
# waits on dockerd, sshd and clients, so two cores already gain).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))

.PHONY: help setup test test-packages test-images test-gpu lint pins pins-check plan sglang-args reproduce clean
REBUILD ?=
# ansible: the playbooks over SSH; slurm: Slurm jobs (slurm/slurm.mk, slurm/README.md).
SCHEDULER ?= ansible

# The variables a help text may name as $(NAME): shown with their values.
HELP_VARS := SKU
help: ## List every target with its variables
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_.%-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' \
		$(MAKEFILE_LIST) | sed $(foreach v,$(HELP_VARS),-e 's|\$$($(v))|$($(v))|g') | sort -u

setup: $(VENV)/.setup-done ## Create .venv with kdakit, the controller tools and test deps at pinned versions. Vars: PYTHON=python3 EXTRAS=...

# One line per phase; pip's own output goes to SETUP_LOG, named (with its tail) when a phase fails.
SETUP_LOG ?= .cache/setup.log
setup_phase = echo "setup: $(1)"; { $(2); } >>$(SETUP_LOG) 2>&1 || { \
	echo "setup: $(1) failed; pip's output is in $(SETUP_LOG) (last lines below)" >&2; \
	tail -n 20 $(SETUP_LOG) >&2; exit 1; }

$(VENV)/.setup-done: pyproject.toml pins.toml Makefile
	@mkdir -p $(dir $(SETUP_LOG)) && : > $(SETUP_LOG)
	@$(call setup_phase,virtual environment $(VENV),$(PYTHON) -m venv $(VENV) && $(PY) -m pip install --upgrade pip)
	@$(call setup_phase,kdakit and its extras ($(EXTRAS)),$(PY) -m pip install -e ".[$(EXTRAS)]")
	@# SGLang's wheel without its GPU stack: enough for its argument parser and benchmark client.
	@$(call setup_phase,SGLang $(SGLANG_VERSION) without its GPU stack,$(PY) -m pip download --no-deps -d $(WHEELS) sglang==$(SGLANG_VERSION) && $(PY) -m pip install --no-deps $(WHEELS)/sglang-$(SGLANG_VERSION)-*.whl)
	@$(call setup_phase,sgl-eval $(SGL_EVAL_VERSION) without its dependency caps,$(PY) -m pip install --no-deps sgl-eval==$(SGL_EVAL_VERSION))
	@touch $@ && echo "setup: done ($(VENV); log: $(SETUP_LOG))"

test: setup ## Run the CPU test suite (everything not marked gpu), a test file per worker at a time. Vars: TEST_WORKERS=<CPUs, at most 4> (1: serial) PYTEST_ARGS=
	$(PY) -m pytest -m "not gpu" $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope) $(PYTEST_ARGS)

# The Debian packages of the Docker, SSH-host, Slurm and browser tests: without them `make test` skips those
# groups and its summary says which (tests/infra/packages.py).
test-packages: ## Install the Debian packages the Docker, SSH-host, Slurm and browser tests need (.ci/apt-packages.txt; root, Debian)
	@[ "$$(id -u)" = 0 ] || { echo "test-packages: apt-get needs root: sudo make test-packages" >&2; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		$$(grep -v '^\s*#' .ci/apt-packages.txt | tr '\n' ' ') >/dev/null

# Optional: the Docker tests build what is missing themselves (and wait while this holds the build engine).
test-images: ## Build the Docker tests' images into their cache (root, after test-packages; CI runs it beside make test, whose Docker fixtures wait for it)
	$(PYTHON) -m tests.infra.prebuild

test-gpu: setup ## Run the GPU tests (needs an NVIDIA GPU). Vars: PYTEST_ARGS=
	$(PY) -m pytest -m gpu $(PYTEST_ARGS)

lint: setup ## ruff, plus every area's lint-* target (hadolint, yamllint, ansible-lint --offline)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(KDAKIT) pins --check
	@for t in $(LINT_TARGETS); do $(MAKE) --no-print-directory $$t; done

pins: setup ## Print the pinned versions
	$(KDAKIT) pins

pins-check: setup ## Fail when any file states a version other than pins.toml's
	$(KDAKIT) pins --check

plan: setup ## Print the exact sglang serve command and container env. Vars: SKU=<kdakit skus> ARM=helion SET="--flag=value ..."
	$(KDAKIT) plan --sku $(SKU) --arm $(ARM) $(foreach s,$(SET),--set=$(s))

sglang-args: setup ## Regenerate the snapshot of SGLang's server arguments from the pinned wheel
	$(KDAKIT) sglang-args --write

reproduce: setup ## The main job: preflight, the image (rebuilt when its tarball's source hash is not this tree's), ab-$(SKU), roll-up, report. Vars: SKU=<kdakit skus> INVENTORY=(localhost) REBUILD=0 (refuse instead of rebuilding) SCHEDULER=slurm (as Slurm jobs: slurm/README.md)
	@want=$$($(PYTHON) images/build_steps.py source-hash . $(SKU) $(BASE_IMAGE)); \
	have=$$(cat $(FILE).source 2>/dev/null || echo none); build=; \
	full="the next step is a full image build (make image image-save SKU=$(SKU): pulls $(BASE_IMAGE) from its registry, builds kdakit on it, saves $(FILE))"; \
	if [ ! -f $(FILE) ]; then build="image: no $(FILE) yet: $$full; Ctrl-C now to stop, or pass FILE=<a saved tarball>"; \
	elif [ "$$have" != "$$want" ]; then \
	  if [ "$(REBUILD)" = 0 ]; then \
	    echo "image: $(FILE) was built from source $${have:0:12}, this tree is $${want:0:12}; refusing (REBUILD=0): make image image-save SKU=$(SKU), or drop REBUILD=0" >&2; exit 1; \
	  fi; build="image: $(FILE) was built from source $${have:0:12}, this tree is $${want:0:12}: $$full; Ctrl-C now to stop, or REBUILD=0 to refuse"; \
	fi; \
	$(if $(filter slurm,$(SCHEDULER)),$(kdakit_slurm_site_note) $(call kdakit_slurm,preflight) --sku $(SKU) --run-id preflight, \
	  $(call kdakit_preflight,$(SKU),--gate --arms $(words $(or $(ARMS),a b)) $(kdakit_arm_args) $$([ -n "$$build" ] && echo --build))); \
	if [ -n "$$build" ]; then echo "$$build"; $(MAKE) --no-print-directory image image-save SKU=$(SKU); fi
	$(MAKE) --no-print-directory ab-$(SKU) SKU=$(SKU) PREFLIGHT_DONE=1

clean: ## Remove the venv and caches (results/ is kept)
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache *.egg-info

AREA_MAKEFILES := $(sort $(wildcard */*.mk))
# Every `lint-*` target an area defines runs under `make lint`.
LINT_TARGETS := $(shell sed -n 's/^\(lint-[a-z0-9-]*\):.*/\1/p' $(AREA_MAKEFILES) /dev/null)
-include $(AREA_MAKEFILES)
