# Playbook targets (included by the root Makefile): thin calls of `kdakit run` (kdakit/run/), which makes the
# run id, writes results/LATEST, gives every ansible-playbook call the controller's facts file, runs the visit
# loop and the roll-up. INVENTORY: the hosts (default: this machine as one host of the default SKU). ARM: an
# arm of kdakit/facts/profiles/arms.toml. SKUs: kdakit/facts/profiles/<sku>.toml (`kdakit skus`); the
# inventory's group of each SKU is named after it.
# RUN_ID: deploy-* and ab-* make a new one (UTC time) unless given; the other steps reuse the last one
# (results/LATEST). DRY_RUN=1: check mode with diff, nothing changes. EXTRA: more ansible-playbook args.

INVENTORY ?= playbooks/inventories/localhost.yml
RUN_ID ?=
DRY_RUN ?=
PREFLIGHT_DONE ?=
# PURGE=1: teardown also removes the image tarballs the kit staged on the hosts.
PURGE ?=
# The arms an A/B runs, in order (empty: arms.toml's `ab`).
ARMS ?=
# The serving protocol of bench and ab-* (kdakit/facts/protocols.toml), e.g. rigorous (interleaved visits); unset:
# the bench role's kdakit_bench_protocol (pr) or what the inventory or EXTRA sets. ab-*: a published A/B's
# protocols (arms.toml's published_ab, e.g. ARMS="triton cutedsl": the CuTe-verify PR's serving and GSM8K)
# unless BENCH_PROTOCOL / GSM8K_PROTOCOL are given (kdakit run ab picks them).
BENCH_PROTOCOL ?=
GSM8K_PROTOCOL ?=
# Preflight refuses an arm whose kernels cannot run on the SKU's GPU (kdakit/facts/kernel_contracts.py).
kdakit_arm_args = $(foreach a,$(ARMS),--arm $(a))
EXTRA ?=
HOSTS ?=
RESULTS ?= results
ANSIBLE_PLAYBOOK ?= $(VENV)/bin/ansible-playbook

# $(call kdakit_run,ACTION): kdakit run ACTION with what every action takes
kdakit_run = $(KDAKIT) run $(1) --results $(RESULTS) --inventory $(INVENTORY) --ansible-playbook $(ANSIBLE_PLAYBOOK) \
	--docker $(DOCKER) --extra="$(EXTRA)" $(if $(RUN_ID),--run-id $(RUN_ID)) $(if $(DRY_RUN),--dry-run) \
	$(if $(BENCH_PROTOCOL),--protocol $(BENCH_PROTOCOL))
# One table of every host's checks (kdakit/checks/preflight.py through playbooks/preflight.yml), before anything
# heavy. As a gate ($(call kdakit_preflight,SKU,--gate [--build])) it stops only when the controller cannot
# build or no host is ready; deploy then records the hosts that are not ready as failed.
kdakit_preflight = $(call kdakit_run,preflight) --sku $(1) $(2)

.PHONY: preflight eval-gsm8k bench collect teardown lint-playbooks

# deploy-<sku> and ab-<sku> exist for every SKU of the registry, and only for those.
kdakit_known_sku = $(if $(filter $(1),$(SKUS)),,$(error no SKU '$(1)': the SKUs are $(SKUS) (kdakit/facts/profiles/)))

preflight: setup ## One table of every host's checks (GPUs, driver, NVIDIA runtime, Docker, weights, bench data, disk) and the builder; nothing else runs. Vars: SKU=<kdakit skus> INVENTORY= PREFLIGHT_BUILD=1 (check the image builder too)
	@$(call kdakit_known_sku,$(SKU))$(call kdakit_preflight,$(SKU),$(if $(PREFLIGHT_BUILD),--build))

# With SCHEDULER=slurm, slurm/slurm.mk defines these steps as Slurm jobs instead.
ifneq ($(SCHEDULER),slurm)
deploy-%: setup ## Preflight, load the image, start the server on the hosts of SKU % (deploy-h200, ...); BENCH_PROTOCOL= adds its server environment. Vars: INVENTORY= ARM=helion RUN_ID=<new> DRY_RUN= BENCH_PROTOCOL=
	@$(call kdakit_known_sku,$*)$(call kdakit_run,step deploy) --sku $* --arm $(ARM)

eval-gsm8k: setup ## GSM8K (kdakit eval gsm8k) on every deployed host. Vars: INVENTORY= ARM=helion RUN_ID=<last> HOSTS=<every SKU group>
	@$(call kdakit_run,step $@) --arm $(ARM) $(if $(HOSTS),--hosts $(HOSTS))

bench: setup ## Serving benchmark (kdakit bench serving) on every deployed host. Vars: INVENTORY= ARM=helion RUN_ID=<last> HOSTS=<every SKU group> BENCH_PROTOCOL=
	@$(call kdakit_run,step $@) --arm $(ARM) $(if $(HOSTS),--hosts $(HOSTS))

collect: setup ## Fetch results, server logs, nvidia-smi -q, dmesg Xid to results/<run-id>/<host>/. Vars: INVENTORY= ARM=helion RUN_ID=<last>
	@$(call kdakit_run,step $@) --arm $(ARM) $(if $(HOSTS),--hosts $(HOSTS))

teardown: setup ## Remove the kit's containers and key file (idempotent); staged image tarballs stay for a re-deploy. Vars: INVENTORY= ARM=helion RUN_ID=<last> HOSTS=<every SKU group> PURGE=1 (the staged tarballs too)
	@$(call kdakit_run,step $@) --arm $(ARM) $(if $(HOSTS),--hosts $(HOSTS)) $(if $(PURGE),--purge)

ab-%: setup ## Preflight, then A/B on the hosts of SKU % (ab-h200, ...): the ARMS in turn (BENCH_PROTOCOL=rigorous: interleaved visits; decisive: visits until the answer is known; ARMS="triton cutedsl": the CuTe-verify PR's protocols), one run id, roll-up table, kdakit report. Vars: INVENTORY= RUN_ID=<new> ARMS=<arms.toml ab> BENCH_PROTOCOL= GSM8K_PROTOCOL=
	@$(call kdakit_known_sku,$*)$(call kdakit_run,ab) --sku $* $(if $(ARMS),--arms "$(ARMS)") \
		$(if $(GSM8K_PROTOCOL),--gsm8k-protocol $(GSM8K_PROTOCOL)) $(if $(PREFLIGHT_DONE),--preflight-done)

endif

lint-playbooks: setup ## yamllint, ansible-lint --offline and a syntax check of every playbook
	$(VENV)/bin/yamllint -s -c playbooks/.yamllint playbooks
	cd playbooks && ANSIBLE_CONFIG=ansible.cfg ../$(VENV)/bin/ansible-lint --offline -q
	for p in preflight deploy eval-gsm8k bench collect teardown interrupted site; do \
	  ANSIBLE_CONFIG=playbooks/ansible.cfg $(ANSIBLE_PLAYBOOK) --syntax-check -i $(INVENTORY) playbooks/$$p.yml || exit 1; \
	done
