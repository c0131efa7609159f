# From-scratch base: SGLang on NVIDIA's CUDA 13.0 image, for sites that do not take SGLang's own image.
# `make image-base` builds it with every version from pins.toml, then: make image BASE_IMAGE=<its tag>.
# The devel flavour: SGLang and flashinfer JIT-compile kernels at run time and need nvcc.
ARG CUDA_BASE=nvidia/cuda:13.0.1-devel-ubuntu24.04
FROM ${CUDA_BASE}

ARG TORCH_VERSION=2.14.1
ARG SGLANG_VERSION=0.5.23
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Ubuntu's own packages move with the distribution's security updates; pin the CUDA_BASE digest instead.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv python3-dev git ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

ENV PATH=/opt/venv/bin:/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# torch from PyTorch's cu130 index first, so that sglang's `torch==` requirement is already met by the
# CUDA 13.0 build and pip keeps it; sglang then brings its CUDA 13 stack (sglang-kernel, flashinfer, ...).
# The optional `cacert` secret is a CA bundle for TLS-intercepting proxies (never stored in the image).
RUN --mount=type=secret,id=cacert \
    --mount=type=cache,target=/root/.cache/pip \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi \
    && pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}" \
    && pip install "sglang==${SGLANG_VERSION}" --extra-index-url "${TORCH_INDEX_URL}"

CMD ["/bin/bash"]
