# Rendered by orch 0.1.0 from dossier 'tiny-embeddings-cuda', variant 'cpu'.
# Dossier identity: 0abce8f58e2356f0f552e71a0759257427958d4d3dba417843c33fcef03b97f7
# Do not edit: change the dossier and run `orch render` again.
# The base image is not pinned by a registry digest.

# ---- builder: the virtual environment, built with tools that never reach the final image ----
FROM orch/debian-python:bookworm AS builder
# Opening labels mark every layer of this temporary stage, failed builds' included, so it can be found.
LABEL io.orch.stage="builder"

RUN python3.11 -m venv /opt/venv
COPY requirements.lock /tmp/orch/requirements.lock
# Wheelhouse mode: the host downloaded exactly the locked wheels (hashes checked); no network is needed.
COPY wheels /tmp/orch/wheels
RUN /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/orch/wheels --require-hashes \
      -r /tmp/orch/requirements.lock

# ---- final image: runtime OS packages, the venv, the code ----
FROM orch/debian-python:bookworm

# The sample runs as an unprivileged user with a fixed uid, so mounted output folders are predictable.
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/orch orch
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONHASHSEED=0
# CPU platform: no accelerator is expected; a GPU that shows up is ignored by this image.
ENV CUDA_VISIBLE_DEVICES=""

COPY app /opt/app
WORKDIR /opt/app
USER 10001:10001

LABEL io.orch.backend.version="none" \
      io.orch.dossier.identity="0abce8f58e2356f0f552e71a0759257427958d4d3dba417843c33fcef03b97f7" \
      io.orch.dossier.name="tiny-embeddings-cuda" \
      io.orch.install.mode="wheelhouse" \
      io.orch.platform="cpu" \
      io.orch.python.version="3.11" \
      io.orch.torch.version="2.13.0+cpu" \
      io.orch.variant="cpu" \
      io.orch.version="0.1.0" \
      org.opencontainers.image.base.name="orch/debian-python:bookworm" \
      org.opencontainers.image.description="Character-trigram embeddings from a fixed-seed torch model, on an NVIDIA GPU (CUDA 12.4)." \
      org.opencontainers.image.title="tiny-embeddings-cuda"
