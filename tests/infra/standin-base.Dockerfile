# CI stand-in for SGLang's CUDA 13 image: Debian (debootstrap) + a venv holding torch (PyPI's CUDA build,
# used on the CPU), triton and sglang WITHOUT its dependencies. Built by tests/infra/images.py, whose build
# context is a wheelhouse assembled on the host; every version comes in as a build argument from pins.toml.
ARG DEBIAN_BASE
FROM ${DEBIAN_BASE}

ARG TORCH_VERSION
ARG TRITON_VERSION
ARG SGLANG_VERSION

ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1

# torch with its nvidia-* libraries (import needs them even on a CPU); triton and sglang without
# dependencies: sglang's full set (flashinfer, deep-gemm, ...) is what the stand-in leaves out.
RUN --mount=type=bind,target=/wheels \
    python3 -m venv /opt/venv \
    && pip install --no-cache-dir --no-index --find-links /wheels "torch==${TORCH_VERSION}" \
    && pip install --no-cache-dir --no-index --find-links /wheels --no-deps \
        "triton==${TRITON_VERSION}" "sglang==${SGLANG_VERSION}"

CMD ["/bin/bash"]
