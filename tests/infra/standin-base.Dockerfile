# CI stand-in for SGLang's CUDA 13 image: Debian (debootstrap) + a venv holding torch (PyPI's CUDA build,
# used on the CPU), triton, sglang WITHOUT its dependencies, and the few packages that importing SGLang's
# KDA backend needs. Built by tests/infra/images.py; its build context holds two wheelhouses assembled on
# the host (torch/ and deps/); every version comes in as a build argument from pins.toml.
ARG DEBIAN_BASE
FROM ${DEBIAN_BASE}

ARG TORCH_VERSION
ARG TRITON_VERSION
ARG SGLANG_VERSION

ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1

# torch with its nvidia-* libraries (import needs them even on a CPU); triton and sglang without
# dependencies: sglang's full set (flashinfer, deep-gemm, sglang-kernel, ...) is what the stand-in leaves out.
RUN --mount=type=bind,source=torch,target=/wheels \
    python3 -m venv /opt/venv \
    && pip install --no-cache-dir --no-index --find-links /wheels "torch==${TORCH_VERSION}" \
    && pip install --no-cache-dir --no-index --find-links /wheels --no-deps \
        "triton==${TRITON_VERSION}" "sglang==${SGLANG_VERSION}"

# What `import sglang.srt.layers.attention.linear.kernels.kda_helion` needs beyond torch (SGLang's image has
# them all); versions as pip resolved them on the host.
ARG SGLANG_IMPORT_DEPS
# hadolint ignore=DL3013
RUN --mount=type=bind,source=deps,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels ${SGLANG_IMPORT_DEPS}

CMD ["/bin/bash"]
