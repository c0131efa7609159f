# Playbook targets (included by the root Makefile). Each runs ansible-playbook with playbooks/ansible.cfg.
# INVENTORY: the hosts (default: this machine as one host of the default SKU). ARM: an arm of
# kdakit/facts/profiles/arms.toml. SKUs: kdakit/facts/profiles/<sku>.toml (`kdakit skus`); the inventory's
# group of each SKU is named after it.
# RUN_ID: deploy-* and ab-* make a new one (UTC time) unless given; the other steps reuse the last one
# (results/LATEST). DRY_RUN=1: check mode with diff, nothing changes. EXTRA: more ansible-playbook args.

INVENTORY ?= playbooks/inventories/localhost.yml
RUN_ID ?=
DRY_RUN ?=
PREFLIGHT_DONE ?=
# PURGE=1: teardown also removes the image tarballs the kit staged on the hosts.
PURGE ?=
# The arms an A/B runs, in order (arms.toml's `ab`).
ARMS ?= $(shell $(PYTHON) -m kdakit.facts.profiles ab)
# The serving protocol of bench and ab-* (bench/protocols.toml), e.g. rigorous (interleaved visits); unset:
# the bench role's kdakit_bench_protocol (pr) or what the inventory or EXTRA sets.
BENCH_PROTOCOL ?=
kdakit_bench_protocol_arg = $(if $(BENCH_PROTOCOL),-e kdakit_bench_protocol=$(BENCH_PROTOCOL))
# ab-*: a published A/B's protocols (arms.toml's published_ab, e.g. ARMS="triton cutedsl": the CuTe-verify
# PR's serving and GSM8K), unless BENCH_PROTOCOL / GSM8K_PROTOCOL are given.
GSM8K_PROTOCOL ?=
kdakit_ab_protocol = $(or $($(1)),$(shell $(PYTHON) -m kdakit.facts.profiles ab-protocol $(2) $(ARMS)))
AB_BENCH_PROTOCOL = $(call kdakit_ab_protocol,BENCH_PROTOCOL,bench)
AB_GSM8K_PROTOCOL = $(call kdakit_ab_protocol,GSM8K_PROTOCOL,gsm8k)
kdakit_ab_protocol_args = $(if $(AB_BENCH_PROTOCOL),-e kdakit_bench_protocol=$(AB_BENCH_PROTOCOL)) \
	$(if $(AB_GSM8K_PROTOCOL),-e kdakit_gsm8k_protocol=$(AB_GSM8K_PROTOCOL))
# Preflight refuses an arm whose kernels cannot run on the SKU's GPU (kdakit/facts/kernel_contracts.py).
kdakit_arm_args = $(foreach a,$(ARMS),--arm $(a))
EXTRA ?=
kdakit_empty :=
HOSTS ?= $(subst $(kdakit_empty) $(kdakit_empty),:,$(SKUS))
RESULTS ?= results
ANSIBLE_PLAYBOOK ?= $(VENV)/bin/ansible-playbook
NEW_RUN_ID := $(or $(RUN_ID),$(shell date -u +%Y%m%dT%H%M%SZ))
LAST_RUN_ID = $(or $(RUN_ID),$(shell cat $(RESULTS)/LATEST 2>/dev/null),$(error no RUN_ID given and no $(RESULTS)/LATEST: run make deploy-<sku> first))

# $(call kdakit_playbook,STEP,HOSTS,RUN_ID,ARM)
# (through run-step.sh: SIGINT/SIGTERM stops the step and removes the containers it started on every host)
kdakit_playbook = ANSIBLE_CONFIG=playbooks/ansible.cfg playbooks/run-step.sh playbooks/$(1).yml $(ANSIBLE_PLAYBOOK) -i $(INVENTORY) \
	-e kdakit_hosts=$(2) -e kdakit_run_id=$(3) -e kdakit_arm=$(4) -e kdakit_results_dir=$(abspath $(RESULTS)) \
	$(if $(DRY_RUN),--check --diff) $(EXTRA)
# (atomically: a full disk keeps the earlier LATEST and says which file, how much is free and where)
kdakit_latest = $(PY) -m kdakit.records.controller_files latest --results $(RESULTS) --run-id $(1)
# One table of every host's checks (kdakit/checks/preflight.py through playbooks/preflight.yml), before anything
# heavy. As a gate ($(call kdakit_preflight,SKU,--gate [--build])) it stops only when the controller cannot
# build or no host is ready; deploy then records the hosts that are not ready as failed.
kdakit_preflight = ANSIBLE_CONFIG=playbooks/ansible.cfg $(PY) kdakit/checks/preflight.py cluster --sku $(1) \
	--inventory $(INVENTORY) --playbook playbooks/preflight.yml --ansible-playbook $(ANSIBLE_PLAYBOOK) \
	--ansible-inventory $(dir $(ANSIBLE_PLAYBOOK))ansible-inventory --docker $(DOCKER) --extra="$(EXTRA)" \
	--results $(RESULTS) $(2)
# A/B on the same hosts under one run id: every step for the triton arm, then for the helion arm; with
# BENCH_PROTOCOL=rigorous, its `repeats` visits per arm interleaved (triton, helion, triton, ...; GSM8K on the
# first visit only); with a sequential protocol (BENCH_PROTOCOL=decisive), visits until its stopping rule
# (python -m kdakit.records.sequential) says stop, at most its max_visits. A host whose deploy failed skips
# its later measuring steps (collect and teardown still run). Ends with one roll-up table (host x arm x step
# -> outcome, cause), then the report; the exit status is non-zero unless all were ok.
define kdakit_ab
$(call kdakit_latest,$(NEW_RUN_ID)) || exit 2; \
set -- $$($(PY) -c 'from kdakit.bench.serving import load_protocols; p = load_protocols()["$(or $(AB_BENCH_PROTOCOL),pr)"]; print(p.repeats, int(p.sequential))') || exit 2; \
visits=$$1; sequential=$$2; started=$$(date +%s); \
rc=0; for visit in $$(seq $$visits); do for arm in $(ARMS); do \
  for step in deploy $$([ $$visit = 1 ] && echo eval-gsm8k) bench collect teardown; do \
    echo "== $(1) $$arm $$step (run $(NEW_RUN_ID)$$([ $$visits -gt 1 ] && echo ", visit $$visit of $$([ $$sequential = 1 ] && echo "at most ")$$visits"))"; \
    $(call kdakit_playbook,$$step,$(1),$(NEW_RUN_ID),$$arm) $(kdakit_ab_protocol_args) -e kdakit_visit=$$visit || rc=1; \
done; done; \
  if [ $$sequential = 1 ]; then decision=$$($(PY) -m kdakit.records.sequential $(RESULTS)/$(NEW_RUN_ID) \
    --protocol $(AB_BENCH_PROTOCOL) --elapsed-s $$(( $$(date +%s) - started ))) || rc=1; \
    echo "== $(1) after visit $$visit: $$decision"; case "$$decision" in *'"stop": true'*) break;; esac; fi; \
done; \
echo "== $(1) roll-up (run $(NEW_RUN_ID))"; \
$(PY) -m kdakit.records.provenance rollup $(RESULTS)/$(NEW_RUN_ID) || rc=1; \
$(KDAKIT) report $(RESULTS)/$(NEW_RUN_ID) || rc=1; exit $$rc
endef

.PHONY: preflight eval-gsm8k bench collect teardown lint-playbooks

# deploy-<sku> and ab-<sku> exist for every SKU of the registry, and only for those.
kdakit_known_sku = $(if $(filter $(1),$(SKUS)),,$(error no SKU '$(1)': the SKUs are $(SKUS) (kdakit/facts/profiles/)))

preflight: setup ## One table of every host's checks (GPUs, driver, NVIDIA runtime, Docker, weights, bench data, disk) and the builder; nothing else runs. Vars: SKU=<kdakit skus> INVENTORY= PREFLIGHT_BUILD=1 (check the image builder too)
	@$(call kdakit_known_sku,$(SKU))$(call kdakit_preflight,$(SKU),$(if $(PREFLIGHT_BUILD),--build))

# With SCHEDULER=slurm, slurm/slurm.mk defines these steps as Slurm jobs instead.
ifneq ($(SCHEDULER),slurm)
deploy-%: setup ## Preflight, load the image, start the server on the hosts of SKU % (deploy-h200, ...); BENCH_PROTOCOL= adds its server environment. Vars: INVENTORY= ARM=helion RUN_ID=<new> DRY_RUN= BENCH_PROTOCOL=
	@$(call kdakit_known_sku,$*)$(call kdakit_preflight,$*,--hosts-only --arm $(ARM))
	@$(if $(DRY_RUN),,$(call kdakit_latest,$(NEW_RUN_ID)))
	$(call kdakit_playbook,deploy,$*,$(NEW_RUN_ID),$(ARM)) $(kdakit_bench_protocol_arg)

eval-gsm8k: setup ## GSM8K (kdakit eval gsm8k) on every deployed host. Vars: INVENTORY= ARM=helion RUN_ID=<last> HOSTS=<every SKU group>
	$(call kdakit_playbook,eval-gsm8k,$(HOSTS),$(LAST_RUN_ID),$(ARM))

bench: setup ## Serving benchmark (kdakit bench serving) on every deployed host. Vars: INVENTORY= ARM=helion RUN_ID=<last> HOSTS=<every SKU group> BENCH_PROTOCOL=
	$(call kdakit_playbook,bench,$(HOSTS),$(LAST_RUN_ID),$(ARM)) $(kdakit_bench_protocol_arg)

collect: setup ## Fetch results, server logs, nvidia-smi -q, dmesg Xid to results/<run-id>/<host>/. Vars: INVENTORY= ARM=helion RUN_ID=<last>
	$(call kdakit_playbook,collect,$(HOSTS),$(LAST_RUN_ID),$(ARM))

teardown: setup ## Remove the kit's containers and key file (idempotent); staged image tarballs stay for a re-deploy. Vars: INVENTORY= ARM=helion RUN_ID=<last> HOSTS=<every SKU group> PURGE=1 (the staged tarballs too)
	$(call kdakit_playbook,teardown,$(HOSTS),$(or $(RUN_ID),$(shell cat $(RESULTS)/LATEST 2>/dev/null),none),$(ARM)) \
	  $(if $(PURGE),-e kdakit_purge=true)

ab-%: setup ## Preflight, then A/B on the hosts of SKU % (ab-h200, ...): the ARMS in turn (BENCH_PROTOCOL=rigorous: interleaved visits; decisive: visits until the answer is known; ARMS="triton cutedsl": the CuTe-verify PR's protocols), one run id, roll-up table, kdakit report. Vars: INVENTORY= RUN_ID=<new> ARMS=<arms.toml ab> BENCH_PROTOCOL= GSM8K_PROTOCOL=
	@$(call kdakit_known_sku,$*)$(if $(PREFLIGHT_DONE),,$(call kdakit_preflight,$*,--gate --arms $(words $(ARMS)) $(kdakit_arm_args)))
	@$(call kdakit_ab,$*)

endif

lint-playbooks: setup ## yamllint, ansible-lint --offline and a syntax check of every playbook
	$(VENV)/bin/yamllint -s -c playbooks/.yamllint playbooks
	cd playbooks && ANSIBLE_CONFIG=ansible.cfg ../$(VENV)/bin/ansible-lint --offline -q
	for p in preflight deploy eval-gsm8k bench collect teardown interrupted site; do \
	  ANSIBLE_CONFIG=playbooks/ansible.cfg $(ANSIBLE_PLAYBOOK) --syntax-check -i $(INVENTORY) playbooks/$$p.yml || exit 1; \
	done
