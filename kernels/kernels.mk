# Kernel targets (included by the root Makefile). A variable left empty is not passed: the command's own
# default applies, and those come from kernels/shapes.toml (`kdakit kernels bench --help` shows them).

KERNELS_RESULTS ?= results
KERNELS_RUN_ID ?=
KERNELS_PHASES ?=
KERNELS_UPSTREAM ?=
KERNELS_CONFIGS ?=

KERNELS_BUDGET ?=

.PHONY: kernels-bench kernels-bench-table kernels-fetch-upstream kernels-patch-check kernels-sweep kernels-seeds

kernels-bench: ## Time SGLang's Triton/Helion KDA kernels vs kdakit's on one GPU; prints the PR's table, writes JSON. Vars: KERNELS_RESULTS=results KERNELS_PHASES= KERNELS_RUN_ID= KERNELS_UPSTREAM=auto|installed|extracted KERNELS_CONFIGS=shipped|default|both
	$(KDAKIT) kernels bench --results-dir $(KERNELS_RESULTS) $(if $(KERNELS_PHASES),--phases $(KERNELS_PHASES)) \
	  $(if $(KERNELS_UPSTREAM),--upstream $(KERNELS_UPSTREAM)) $(if $(KERNELS_CONFIGS),--configs $(KERNELS_CONFIGS)) \
	  $(if $(KERNELS_RUN_ID),--run-id $(KERNELS_RUN_ID))

kernels-sweep: ## The small-token prefill PR's sweep (216 cases + T = 1 probes) of every Helion prefill against SGLang's Triton on one GPU. Vars: KERNELS_RESULTS=results KERNELS_RUN_ID=
	$(KDAKIT) kernels sweep --results-dir $(KERNELS_RESULTS) $(if $(KERNELS_RUN_ID),--run-id $(KERNELS_RUN_ID))

kernels-seeds: ## The seed PRs' kernel measurements in one bounded GPU call: per-layer verify table, then the sweep. Vars: KERNELS_RESULTS=results KERNELS_RUN_ID= KERNELS_BUDGET= (s)
	$(KDAKIT) kernels seeds --results-dir $(KERNELS_RESULTS) $(if $(KERNELS_RUN_ID),--run-id $(KERNELS_RUN_ID)) \
	  $(if $(KERNELS_BUDGET),--budget-s $(KERNELS_BUDGET))

kernels-bench-table: ## Regenerate kernels/BENCH.md's current tables from the newest records in measurements/kernels-bench/
	$(KDAKIT) kernels bench-table --write

kernels-fetch-upstream: ## Extract SGLang's KDA kernel modules from the pinned wheel (pip download if missing) into ~/.cache/kdakit
	$(KDAKIT) kernels fetch-upstream

kernels-patch-check: ## Check that kdakit's SGLang patch applies to the installed sglang (or already is)
	$(KDAKIT) kernels patch --check

AUTOTUNE_KERNELS ?=
AUTOTUNE_HEADS ?=
AUTOTUNE_BATCHES ?=
AUTOTUNE_TOKENS ?=
AUTOTUNE_BUDGET ?=

.PHONY: autotune
autotune: ## Tune kdakit's Helion KDA kernels on this GPU (run inside the image) and write kernels/configs/$(SKU)/. Vars: SKU=h200 AUTOTUNE_KERNELS= AUTOTUNE_HEADS= AUTOTUNE_BATCHES= AUTOTUNE_TOKENS= (prefill) AUTOTUNE_BUDGET= (s per bucket); empty: `kdakit kernels autotune --help`'s defaults
	$(KDAKIT) kernels autotune --sku $(SKU) $(if $(AUTOTUNE_KERNELS),--kernels $(AUTOTUNE_KERNELS)) \
	  $(if $(AUTOTUNE_HEADS),--heads $(AUTOTUNE_HEADS)) $(if $(AUTOTUNE_BATCHES),--batches $(AUTOTUNE_BATCHES)) \
	  $(if $(AUTOTUNE_TOKENS),--tokens $(AUTOTUNE_TOKENS)) $(if $(AUTOTUNE_BUDGET),--budget-seconds $(AUTOTUNE_BUDGET))
