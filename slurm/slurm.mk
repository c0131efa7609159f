# Slurm targets (included by the root Makefile). With SCHEDULER=slurm, reproduce and the step targets (deploy-<sku>,
# eval-gsm8k, bench, collect, teardown, ab-<sku>) run on Slurm: ab-<sku> through `kdakit run ab --scheduler slurm`
# (one allocation for the whole A/B), the single steps through `kdakit slurm` (a held server job and its job
# steps); slurm/README.md tells the path. SLURM_SETTINGS: the site's settings file (start from
# slurm/site.example.toml; default slurm/site.toml when it exists). SLURM_SET="KEY=VALUE ...": overrides.
# DRY_RUN=1 prints the job scripts and submits nothing. RESULTS must be on storage every node mounts.

SLURM_SETTINGS ?= $(wildcard slurm/site.toml)
SLURM_SET ?=
SQUASHFS ?= $(basename $(basename $(FILE))).sqsh
# $(call kdakit_slurm,ACTION): kdakit slurm ACTION with the settings, results, protocol, run id and dry run
kdakit_slurm = $(KDAKIT) slurm $(1) $(if $(SLURM_SETTINGS),--settings $(SLURM_SETTINGS)) \
	$(foreach s,$(SLURM_SET),--set=$(s)) --results $(RESULTS) $(if $(DRY_RUN),--dry-run) \
	$(if $(BENCH_PROTOCOL),--protocol $(BENCH_PROTOCOL))

# Without a settings file the kit runs on the defaults; say which file a site writes first.
kdakit_slurm_site_note = $(if $(SLURM_SETTINGS),,echo "slurm: no site settings (slurm/site.toml): the defaults apply; create slurm/site.toml from slurm/site.example.toml (or pass SLURM_SETTINGS=<file>)" >&2;)

.PHONY: slurm-preflight slurm-script image-squashfs

slurm-preflight: setup ## Slurm: its commands and controller, the partition and its time limit, the runtime (pyxis, docker) and sbatch --test-only of the A/B's script. Vars: SLURM_SETTINGS= SLURM_SET= SKU=<kdakit skus>
	@$(kdakit_slurm_site_note)
	$(call kdakit_slurm,preflight) --sku $(SKU) --run-id preflight

slurm-script: setup ## Slurm: print the A/B allocation's job script. Vars: SLURM_SETTINGS= SLURM_SET= SKU=<kdakit skus> ARMS= BENCH_PROTOCOL= RUN_ID=
	$(call kdakit_slurm,script) --sku $(SKU) --run-id $(or $(RUN_ID),example) $(if $(ARMS),--arms "$(ARMS)")

image-squashfs: setup ## pyxis/enroot: the image-save tarball as an enroot squashfs for srun --container-image (needs docker and enroot here). Vars: SKU=<kdakit skus> FILE= IMAGE= SQUASHFS=<FILE>.sqsh
	$(PY) -m kdakit.slurm.script enroot-import --tarball $(FILE) --ref $(IMAGE) --squashfs $(SQUASHFS) --docker $(DOCKER)

ifeq ($(SCHEDULER),slurm)
.PHONY: eval-gsm8k bench collect teardown

deploy-%: setup
	@$(call kdakit_known_sku,$*)$(call kdakit_slurm,deploy) --sku $* --arm $(ARM) $(if $(RUN_ID),--run-id $(RUN_ID))

eval-gsm8k bench: setup
	$(call kdakit_slurm,step $@) --arm $(ARM) $(if $(RUN_ID),--run-id $(RUN_ID))

collect: setup
	$(call kdakit_slurm,collect) --arm $(ARM) $(if $(RUN_ID),--run-id $(RUN_ID))

teardown: setup
	$(call kdakit_slurm,teardown) $(if $(RUN_ID),--run-id $(RUN_ID))

ab-%: setup
	@$(call kdakit_known_sku,$*)$(call kdakit_run,ab) --sku $* --scheduler slurm $(if $(ARMS),--arms "$(ARMS)") \
		$(if $(SLURM_SETTINGS),--slurm-settings $(SLURM_SETTINGS)) $(foreach s,$(SLURM_SET),--slurm-set=$(s))
endif
