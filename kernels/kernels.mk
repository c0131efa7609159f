# Kernel targets (included by the root Makefile).

KERNELS_RESULTS ?= results
KERNELS_RUN_ID ?=
KERNELS_PHASES ?= prefill,decode,verify
KERNELS_UPSTREAM ?= auto
KERNELS_CONFIGS ?= shipped

.PHONY: kernels-bench kernels-fetch-upstream kernels-patch-check

kernels-bench: ## Time SGLang's Triton/Helion KDA kernels vs kdakit's on one GPU; prints the PR's table, writes JSON. Vars: KERNELS_PHASES=prefill,decode,verify KERNELS_RESULTS=results KERNELS_RUN_ID= KERNELS_UPSTREAM=auto|installed|extracted KERNELS_CONFIGS=shipped|default
	$(KDAKIT) kernels bench --phases $(KERNELS_PHASES) --results-dir $(KERNELS_RESULTS) \
	  --upstream $(KERNELS_UPSTREAM) --configs $(KERNELS_CONFIGS) $(if $(KERNELS_RUN_ID),--run-id $(KERNELS_RUN_ID))

kernels-fetch-upstream: ## Extract SGLang's KDA kernel modules from the pinned wheel (pip download if missing) into ~/.cache/kdakit
	$(KDAKIT) kernels fetch-upstream

kernels-patch-check: ## Check that kdakit's SGLang patch applies to the installed sglang (or already is)
	$(KDAKIT) kernels patch --check

AUTOTUNE_KERNELS ?= decode,verify,prefill
AUTOTUNE_HEADS ?= 16,8
AUTOTUNE_BATCHES ?= 1,2,4,8,16,24,32,40,48
AUTOTUNE_TOKENS ?= 4096,8192
AUTOTUNE_BUDGET ?= 60

.PHONY: autotune
autotune: ## Tune kdakit's Helion KDA kernels on this GPU (run inside the image) and write kernels/configs/$(SKU)/. Vars: SKU=h200 AUTOTUNE_KERNELS=decode,verify,prefill AUTOTUNE_HEADS=16,8 AUTOTUNE_BATCHES=1,...,48 AUTOTUNE_TOKENS=4096,8192 (prefill) AUTOTUNE_BUDGET=60 (s per bucket)
	$(KDAKIT) kernels autotune --sku $(SKU) --kernels $(AUTOTUNE_KERNELS) --heads $(AUTOTUNE_HEADS) \
	  --batches $(AUTOTUNE_BATCHES) --tokens $(AUTOTUNE_TOKENS) --budget-seconds $(AUTOTUNE_BUDGET)
