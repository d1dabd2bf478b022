# orch — the whole set-up on a fresh machine is `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
ORCH   := $(BIN)/orch
OUT    ?= out

.PHONY: venv engine podman nightly-services nightly-services-stop registry registry-tools test-tools base test test-unit test-integration lint demo nightly-demo bench golden clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

## engine: make sure a Docker engine answers (installs docker.io and starts dockerd as root when none does)
engine:
	scripts/ensure-engine.sh

## podman: rootless Podman for an unprivileged user (default orch-podman) and its API socket, the second engine
## kind (scripts/podman.sh; as root: installs podman, creates the user, starts `podman system service`)
podman: engine
	scripts/podman.sh start

## nightly-services: what the nightly targets' tests run on: a second dockerd (TLS on a loopback port, its
## own data root; scripts/second-dockerd.sh) and a single-node Slurm cluster (scripts/slurm.sh). As root.
nightly-services: engine
	scripts/second-dockerd.sh start
	scripts/slurm.sh start

## nightly-services-stop: stops both (idempotent); the second daemon's images stay for a warm cache
nightly-services-stop:
	scripts/slurm.sh stop
	scripts/second-dockerd.sh stop

## base: the local Debian base image the examples build on (debootstrap + docker import; reused when present)
base: venv engine
	$(ORCH) base

## registry: a container registry on 127.0.0.1:5055 with htpasswd auth (Debian's docker-registry, installed
## when missing); `scripts/registry.sh env` prints its settings, `scripts/registry.sh stop` stops it
registry:
	scripts/registry.sh start

## registry-tools: docker-registry and htpasswd installed (the publishing tests start and stop their own registry)
registry-tools:
	scripts/registry.sh install

## test-tools: chromium for the browser test of the HTML report (apt-get as root when missing)
test-tools:
	scripts/ensure-test-tools.sh

## test: the whole suite — lint, unit, golden, system (browser) and integration tests on the real engine.
## Two workers: the integration tests keep one (one xdist group, in file order), the rest run on the other
## (docs/testing.md: the time budget per folder).
test: venv engine nightly-services registry-tools test-tools podman lint
	$(BIN)/pytest -n 2 --dist loadgroup

test-unit: venv
	$(BIN)/pytest tests/unit tests/golden

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

## golden: rewrite the golden files after an intended change (review the diff!)
golden: venv
	$(BIN)/pytest tests/golden --update-golden

## demo: the main job end to end on the CPU example
demo: venv engine base
	scripts/demo.sh $(OUT)

## nightly-demo: two nights of a plan on the examples, a package bumped in one lock in between (docs/nightly.md)
## Its targets: this engine, the second dockerd over TLS and the Slurm partition (`make nightly-services`).
nightly-demo: venv engine base nightly-services
	eval "$$(scripts/second-dockerd.sh env)"; eval "$$(scripts/slurm.sh env)"; \
	NIGHTLY_DEMO_DOCKER_B=$$DOCKER_HOST NIGHTLY_DEMO_TLS=$$DOCKER_CERT_PATH \
	NIGHTLY_DEMO_SLURM_PARTITION=orch NIGHTLY_DEMO_SLURM_SHARED=$(abspath $(OUT))/nightly-demo-slurm \
	env -u DOCKER_HOST -u DOCKER_TLS_VERIFY -u DOCKER_CERT_PATH scripts/nightly-demo.sh $(OUT)/nightly-demo

bench: venv engine base
	$(BIN)/python benchmarks/cli_startup.py
	$(BIN)/python benchmarks/build_overhead.py
	$(BIN)/python benchmarks/cold_build.py
	$(BIN)/python benchmarks/probe_overhead.py
	$(BIN)/python benchmarks/sample_check.py

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .mypy_cache .ruff_cache
