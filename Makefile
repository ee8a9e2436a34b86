# Two commands do everything on a fresh machine: `make run` and `make test`.
# Everything installs into .venv (tools/install_env.py): by default torch/torchvision pinned by
# constraints.txt (the builds this machine serves locally; pyproject.toml declares the ranges).
# `make install PYTHON=/path/to/python` over an interpreter that already has a supported torch,
# torchvision and pyarrow (a GPU host, a container) layers .venv over it and installs only what
# is missing; with PIP_NO_INDEX=1 nothing is fetched and missing wheels come from WHEELS=dir.

PYTHON  ?= python3
WHEELS  ?=
OUT_DIR ?= out/gpu-check
PYTEST_ARGS ?=
VENV    := .venv
BIN     := $(VENV)/bin
# PYTHON named on the command line or in the environment: build .venv on that interpreter.
NAMED   := $(if $(filter command line environment environment override,$(origin PYTHON)),--named)
ORIGINAL_PATH := $(PATH)
export PATH := $(abspath $(BIN)):$(PATH)
# dora 1.1 resolves a node `path:` that is not a file (our console scripts) with `uv run which`
# when uv is on PATH (dora-rs-cli installs it). pyproject.toml's `[tool.uv] managed = false` keeps
# uv from locking and syncing this project; UV_NO_PROJECT=1 also covers dataflows run from inside
# another Python project (a test's temporary directory under someone's uv project, say).
export UV_NO_PROJECT := 1

.PHONY: install install-floor run run-cluster test test-fast test-floor check test-gpu gpu-check bench plots fuzz wheel \
	clean

# Does nothing when .venv is up to date with pyproject.toml, constraints.txt and the installer.
# Run by .venv's own python once there is one (PYTHON= not named): the default python3 may be
# older than the project needs when .venv was layered over another interpreter.
INSTALLER := $(if $(NAMED),$(PYTHON),$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)))
install:
	@PATH='$(ORIGINAL_PATH)' $(INSTALLER) tools/install_env.py --python '$(PYTHON)' $(NAMED) $(if $(WHEELS),--wheels '$(WHEELS)') --venv $(VENV)

# The default pipeline with a coordinator and daemon (`dora up`), torn down (`dora down`) when it
# ends or is interrupted. A coordinator that was already running is used and left running. dora's
# output goes through tools/run_quietly.py: dora 1.1's own harmless diagnostics (dora-rs/dora#2742)
# are hidden and counted, so a passing run shows no warning (TC_DORA_DIAGNOSTICS=1 shows them).
run: install
	@mkdir -p out
	@set -e; \
	if dora list >/dev/null 2>&1; then \
		echo "make run: using the dora coordinator already running (left running afterwards)"; \
	else \
		trap 'dora down >/dev/null 2>&1 || true' EXIT; \
		trap 'exit 130' INT TERM; \
		dora up; \
	fi; \
	rm -f out/pipeline.rrd; \
	$(BIN)/python tools/run_quietly.py dora start dataflow.yml --attach; \
	echo "make run: report written to out/receiver-report.json"; \
	if [ -s out/pipeline.rrd ]; then \
		echo "make run: recording written to out/pipeline.rrd: open it with  $(BIN)/rerun out/pipeline.rrd  (or any rerun viewer 0.41+)"; \
	else \
		echo "make run: no recording (rerun-sdk is not installed: pip install 'rerun-sdk>=0.41' into $(VENV), then make run)"; \
	fi

# The same nodes on two machines, A and B: a coordinator and two daemons on loopback (free ports
# chosen at run time), the dataflow-cluster.yml nodes deployed on both, both receivers' reports
# checked, and only the processes it started torn down, by PID, also on Ctrl-C.
run-cluster: install
	@mkdir -p out
	$(BIN)/python -m tools.local_cluster dataflow-cluster.yml \
		--report out/cluster-report-A.json --report out/cluster-report-B.json

# Everything (what CI runs): tests/{codec,ipc,nodes,bench} then tests/e2e (real dora dataflows, installs);
# tests/bench runs every bench script at tiny sizes (smoke tests: a script that no longer runs fails).
test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The oldest supported releases (what CI runs after make test): .venv-floor, made by the same
# installer with constraints-floor.txt's pins (torch 2.11, torchvision 0.26, torchcodec 0.16;
# --fresh: never layered over an interpreter's own torch), then the fast tier and FLOOR_E2E, the
# project's nodes in real dataflows (about 5 minutes on 2 cores; left out: the installs, which build
# environments, the hub nodes, the two-machine cluster and make gpu-check). Both runs report; it
# fails if either failed. .venv is not touched.
FLOOR_VENV := .venv-floor
FLOOR_BIN  := $(FLOOR_VENV)/bin
FLOOR_E2E  ?= tests/e2e/test_dora_e2e.py tests/e2e/test_nodes_e2e.py tests/e2e/test_delivery_e2e.py \
	tests/e2e/test_rerun_sink_e2e.py
FLOOR_PATH := $(abspath $(FLOOR_BIN)):$(ORIGINAL_PATH)
install-floor:
	@PATH='$(ORIGINAL_PATH)' $(if $(NAMED),$(PYTHON),$(if $(wildcard $(FLOOR_BIN)/python),$(FLOOR_BIN)/python,$(PYTHON))) \
		tools/install_env.py --python '$(PYTHON)' $(NAMED) $(if $(WHEELS),--wheels '$(WHEELS)') \
		--venv $(FLOOR_VENV) --constraints constraints-floor.txt --fresh

test-floor: install-floor
	@status=0; \
	echo "make test-floor: the fast tier"; \
	PATH='$(FLOOR_PATH)' $(FLOOR_BIN)/python -m pytest -q -m "not e2e and not slow" tests/codec tests/ipc tests/nodes \
		tests/bench \
		$(PYTEST_ARGS) || status=1; \
	echo "make test-floor: $(FLOOR_E2E)"; \
	PATH='$(FLOOR_PATH)' $(FLOOR_BIN)/python -m pytest -q $(FLOOR_E2E) $(PYTEST_ARGS) || status=1; \
	exit $$status

# The three tiers and the benchmarks' smoke tests without a dora dataflow, the dora CLI or an
# install, and without the tests marked slow (soaks, fresh interpreters): under a minute, for
# while editing.
test-fast: install
	$(BIN)/python -m pytest -q -m "not e2e and not slow" tests/codec tests/ipc tests/nodes tests/bench $(PYTEST_ARGS)

# Lint, format and types (what CI runs before the tests): ruff check and ruff format --check over
# the tree, mypy over tensor_codec and nodes/common (pyproject.toml's [tool.ruff] and [tool.mypy]);
# all three run, then make check fails if any found something. The tools come with the `lint`
# extra, which `make install` installs where it can be had.
LINT_TOOLS := ruff mypy
check: install
	@missing=$$(for tool in $(LINT_TOOLS); do \
		$(BIN)/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$$tool') is None)" || printf ' %s' $$tool; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "make check:$$missing not installed in $(VENV) (the lint extra, which make install installs where it can be had);" >&2; \
		echo "  install with: $(BIN)/python -m pip install -c constraints.txt$$missing  (offline: add --no-index --find-links <wheels>)" >&2; \
		exit 1; \
	fi
	@status=0; \
	for step in "ruff check ." "ruff format --check ." "mypy"; do \
		echo "$(BIN)/python -m $$step"; \
		$(BIN)/python -m $$step || status=1; \
	done; \
	exit $$status

test-gpu: install
	$(BIN)/python -m pytest -q -m gpu $(PYTEST_ARGS)

# The whole GPU side in one command: environment report, every gpu test, the default pipeline
# with every node on CUDA, the two-machine pipeline with CUDA tensors, the GPU benchmarks;
# report.md and report.json under OUT_DIR. Without CUDA: says so, checks what it can, exits 0.
gpu-check: install
	$(BIN)/python -m tools.gpu_check --out '$(OUT_DIR)'

bench: install
	$(BIN)/python bench/run_all.py

# The benchmarks' results (out/bench/<script>.json, written by each bench script) drawn as PNGs in
# out/bench/img/; a benchmark not run is listed as skipped. Needs matplotlib (the `plots` extra).
plots: install
	$(BIN)/python bench/plots.py

# The structure-aware decode fuzzer (docs/fuzzing.md): 100,000 cases on one worker per CPU by
# default; crashes, hangs and unexpected exceptions are written as reproducers under out/fuzz.
# e.g. make fuzz FUZZ_ARGS="--cases 1000000 --seed 7 --workers 8"
FUZZ_ARGS ?= --cases 100000
fuzz: install
	$(BIN)/python -m tools.fuzz $(FUZZ_ARGS)

# The fuzzer's node-level mode (docs/fuzzing.md, "Node-level fuzzing"): hostile messages and acks
# into the tc-* nodes (sender, camera, receiver, JPEG encoder, decoder and sink) through real dora
# dataflows, each node's counts checked against what was sent, and the sender's throughput with
# and without a sustained ack flood, 20,000 a second (about 2.5 minutes on 2 cores). A target of
# its own, with its own variable: the two modes take different options, and FUZZ_ARGS's default
# (--cases) is not one of this mode's. `make fuzz FUZZ_ARGS="--nodes ..."` runs the same thing.
# e.g. make fuzz-nodes FUZZ_NODES_ARGS="--seed 3 --targets sender,decoder --hostile 1000"
.PHONY: fuzz-nodes
FUZZ_NODES_ARGS ?=
fuzz-nodes: install
	$(BIN)/python -m tools.fuzz --nodes $(FUZZ_NODES_ARGS)

# A wheel of the project in dist/, for installing into another environment (one that has, or may
# fetch, torch): `pip install dist/dora_tensor_codec-*.whl`. Offline (PIP_NO_INDEX=1) it builds
# with .venv's setuptools instead of fetching one.
wheel: install
	$(BIN)/python -m pip wheel --quiet --no-deps $(if $(filter 1 true yes on,$(PIP_NO_INDEX)),--no-build-isolation) --wheel-dir dist .
	@ls dist/*.whl

clean:
	rm -rf $(VENV) $(FLOOR_VENV) out dist build .pytest_cache .hypothesis
