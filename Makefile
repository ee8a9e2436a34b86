# Two commands do everything on a fresh machine: `make run` and `make test`.
# Everything installs into .venv (torch/torchvision pinned by constraints.txt to the builds this
# machine serves locally; the project itself declares ranges in pyproject.toml).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export PATH := $(abspath $(BIN)):$(PATH)
# dora 1.1 resolves a node `path:` that is not a file (our console scripts) with `uv run which`
# when uv is on PATH (dora-rs-cli installs it); inside this pip-managed project uv would then try
# to lock and sync the project. UV_NO_PROJECT=1 makes uv look the script up on PATH only.
export UV_NO_PROJECT := 1

.PHONY: install run run-cluster test test-gpu bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

# The default pipeline with a coordinator and daemon (`dora up`), torn down (`dora down`) when it
# ends or is interrupted. A coordinator that was already running is used and left running.
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
	dora start dataflow.yml --attach; \
	echo "make run: report written to out/receiver-report.json"

# The same nodes on two machines, A and B: a coordinator and two daemons on loopback (free ports
# chosen at run time), the dataflow-cluster.yml nodes deployed on both, both receivers' reports
# checked, and only the processes it started torn down, by PID, also on Ctrl-C.
run-cluster: install
	@mkdir -p out
	$(BIN)/python -m tensor_codec_nodes.local_cluster dataflow-cluster.yml \
		--report out/cluster-report-A.json --report out/cluster-report-B.json

test: install
	$(BIN)/python -m pytest -q

test-gpu: install
	$(BIN)/python -m pytest -q -m gpu

bench: install
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
