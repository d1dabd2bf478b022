# Rendered by orch 0.1.0 from dossier 'minilm-embeddings-s3'.
# Dossier identity: c2ef63bc97095910ef2c80aebff870309423f794592755d939ba66c1b4ecf74e
# Do not edit: change the dossier and run `orch render` again.
# The base image is not pinned by a registry digest.

# ---- builder: the virtual environment, built with tools that never reach the final image ----
FROM orch/debian-python:bookworm AS builder
# Opening labels mark every layer of this temporary stage, failed builds' included, so it can be found.
LABEL io.orch.stage="builder"

RUN python3.11 -m venv --without-pip /opt/venv
COPY requirements.lock /tmp/orch/requirements.lock
# Wheelhouse mode: the host downloaded exactly the locked wheels (hashes checked); no network is needed.
COPY wheels /tmp/orch/wheels
# uv, unpacked from its own hash-pinned wheel (collected with the others) and never installed: it installs
# the lock in parallel; then the bytecode is compiled (start-up needs it: the venv is read-only at run time).
RUN python3.11 -m zipfile -e /tmp/orch/wheels/uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl /tmp/orch/uv \
 && chmod 0755 /tmp/orch/uv/uv-0.13.9.data/scripts/uv \
 && { python3.11 -c "import ensurepip as e, os, sys; ps = e._get_packages(); fs = {n: p.wheel_path or os.path.join(os.path.dirname(e.__file__), '_bundled', p.wheel_name) for n, p in ps.items()}; sys.exit(1) if not fs or not all(map(os.path.isfile, fs.values())) else open('/tmp/orch/seed.txt', 'w').write(''.join(sorted({'--find-links ' + os.path.dirname(f) + chr(10) for f in fs.values()})) + ''.join(n + '==' + ps[n].version + chr(10) for n in sorted(ps)))" \
      && /tmp/orch/uv/uv-0.13.9.data/scripts/uv pip install --python /opt/venv/bin/python --no-cache --no-index --no-deps -r /tmp/orch/seed.txt \
      || { echo 'orch: seeding the venv from ensurepip instead'; /opt/venv/bin/python -m ensurepip --upgrade --default-pip; }; } \
 && /tmp/orch/uv/uv-0.13.9.data/scripts/uv pip install --python /opt/venv/bin/python --no-cache --no-index \
      --find-links /tmp/orch/wheels --require-hashes -r /tmp/orch/requirements.lock \
 && { /opt/venv/bin/python -m compileall -q -j 0 -x '/tests/' /opt/venv/lib/python3.11/site-packages \
      || echo 'orch: the files above did not compile to bytecode; Python compiles them at import'; }

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
      io.orch.dossier.identity="c2ef63bc97095910ef2c80aebff870309423f794592755d939ba66c1b4ecf74e" \
      io.orch.dossier.name="minilm-embeddings-s3" \
      io.orch.install.mode="wheelhouse" \
      io.orch.installer="uv" \
      io.orch.platform="cpu" \
      io.orch.python.version="3.11" \
      io.orch.torch.version="2.13.0+cpu" \
      io.orch.version="0.1.0" \
      org.opencontainers.image.base.name="orch/debian-python:bookworm" \
      org.opencontainers.image.description="all-MiniLM-L6-v2 sentence embeddings, weights from an S3 bucket, on the CPU." \
      org.opencontainers.image.title="minilm-embeddings-s3"
