#!/bin/sh
# orch's install step for BuildKit builds: creates /opt/venv and installs the lock into it, offline.
#
#   sh install-venv.sh PYTHON UV_WHEEL UV_BINARY UV_SHA256
#
# Run by the one RUN step of templates/dockerfiles/base.Dockerfile.j2 (`plan.mounted_wheels`), which mounts
# for that step only: this folder at /tmp/orch/bin, the wheels at /tmp/orch/wheels (the context's, or orch's
# wheels image's: a tag on a shared engine, so not trusted), the lock at /tmp/orch/requirements.lock and a
# tmpfs at /tmp/orch/work; none of them reaches a layer. The commands are the classic feed build's (same
# order, same options), so both builders give one environment digest.
set -eu
python=$1
uv_wheel=$2
uv_binary=$3
uv_sha256=$4
bin=/tmp/orch/bin
wheels=/tmp/orch/wheels
work=/tmp/orch/work

# uv, unpacked from its own hash-pinned wheel (collected with the locked ones) and never installed; its
# sha256 checked first, as uv checks the locked wheels', so no wheel but the one orch pinned runs here.
"$python" -c 'import hashlib, sys; data = open(sys.argv[1], "rb").read(); sys.exit(0 if hashlib.sha256(data).hexdigest() == sys.argv[2] else "error: sha256 differs for " + sys.argv[1] + " (expected " + sys.argv[2] + "): not the uv wheel orch pinned")' \
  "$wheels/$uv_wheel" "$uv_sha256"
"$python" -m venv --without-pip /opt/venv
"$python" -m zipfile -e "$wheels/$uv_wheel" "$work/uv"
chmod 0755 "$work/uv/$uv_binary"
uv="$work/uv/$uv_binary"

# The venv's seed: ensurepip's own wheels, installed by uv (venv_seed.py says why), else ensurepip itself.
if "$python" "$bin/venv_seed.py" "$work/seed.txt" \
  && "$uv" pip install --python /opt/venv/bin/python --no-cache --no-index --no-deps -r "$work/seed.txt"; then
  :
else
  echo 'orch: seeding the venv from ensurepip instead'
  /opt/venv/bin/python -m ensurepip --upgrade --default-pip
fi

# The lock, every wheel checked against its sha256, nothing from any index.
"$uv" pip install --python /opt/venv/bin/python --no-cache --no-index \
  --find-links "$wheels" --require-hashes -r /tmp/orch/requirements.lock

# The bytecode, compiled once (the venv is read-only at run time), except under tests/ folders: the .pyc
# files of the classic build's `compileall -j 0`, in half its time (compile_venv.py says why).
site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
/opt/venv/bin/python "$bin/compile_venv.py" "$site"
