# datasched: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test coverage lint format constraints wheel-smoke bench reproduce reproduce-romosan \
	reproduce-grid hosts hosts-down clean

COMPILED := src/datasched/_compiled.json

venv: $(STAMP) $(COMPILED)

# Every package at the version constraints.txt pins, so that a fresh machine (CI's) installs
# what was tested, not whatever resolves that day. The editable install compiles nothing
# (DATASCHED_PURE_BUILD); the hot path is compiled in place below.
$(STAMP): pyproject.toml constraints.txt setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	DATASCHED_PURE_BUILD=1 $(BIN)/python -m pip install --quiet -c constraints.txt -e '.[all]'
	touch $(STAMP)

# The simulator's hot path compiled by Cython from its own sources, beside them (setup.py,
# src/datasched/_compiled.py; a few minutes on two cores the first time, then only what
# changed). Where it cannot be built the package runs from its sources, the same results.
# DATASCHED_PURE=1 runs from the sources in any case.
$(COMPILED): $(STAMP) setup.py src/datasched/_compiled.py $(wildcard src/datasched/core/*.py src/datasched/core/*.pxd \
		src/datasched/sim/*.py src/datasched/sim/*.pxd src/datasched/policies/ponce/*.py src/datasched/policies/ponce/*.pxd)
	$(BIN)/python setup.py --quiet build_ext --inplace --parallel $(TEST_PROCESSES)

# constraints.txt renewed: datasched with every extra installed unconstrained into a fresh
# environment (the newest versions that resolve today), then frozen.
constraints:
	set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(PYTHON) -m venv "$$tmp/venv"; \
	"$$tmp/venv/bin/python" -m pip install --quiet --upgrade pip; \
	DATASCHED_PURE_BUILD=1 "$$tmp/venv/bin/python" -m pip install --quiet -e '.[all]'; \
	{ sed -n '/^#/p' constraints.txt; "$$tmp/venv/bin/python" -m pip freeze --exclude-editable; } \
		> "$$tmp/constraints.txt"; \
	mv "$$tmp/constraints.txt" constraints.txt
	@echo "constraints.txt renewed; bump the hooks' pins in .pre-commit-config.yaml to match"

# The wheel built, installed into a fresh environment and run from outside the source tree:
# what a user gets from `pip install datasched` (docs/contributing.md).
wheel-smoke: venv
	PYTHON=$(BIN)/python .ci/wheel-smoke

demo: venv
	$(BIN)/datasched demo
	$(BIN)/datasched demo-service

# The tests run in two processes (pytest-xdist), each test module in one of them, so that a
# module's shared fixtures (a cluster, a quick reproduction) are built once.
TEST_PROCESSES ?= 2

test: venv lint
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadscope

# The same suite with the package's line coverage reported (modules not wholly covered, with
# their missed lines, and the total); it fails below the floor. Tracing slows the suite nearly
# twofold (1,078 s against 565 s on two cores), past what `make test` may take, so it is a
# target of its own, which CI runs after `make test`. The whole suite covers 90.7 %. It runs on
# the sources (DATASCHED_PURE=1: compiled modules are not traced), so that CI runs the whole
# suite on both builds: `make test` on the compiled hot path, this on its pure-Python reference.
COVERAGE_FLOOR ?= 90

coverage: venv
	DATASCHED_PURE=1 $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadscope \
		--cov=datasched --cov-report=term:skip-covered --cov-fail-under=$(COVERAGE_FLOOR)

lint: venv
	$(BIN)/ruff check src tests benchmarks setup.py
	$(BIN)/ruff format --check src tests benchmarks setup.py
	$(BIN)/mypy src tests
	$(BIN)/codespell
	$(BIN)/shellcheck .ci/run .ci/wheel-smoke

format: venv
	$(BIN)/ruff format src tests benchmarks setup.py
	$(BIN)/ruff check --fix src tests benchmarks setup.py

bench: venv
	$(BIN)/python benchmarks/run.py --repeat 3
	$(BIN)/python benchmarks/runtime.py
	$(BIN)/python benchmarks/cosched_solver.py
	$(BIN)/python benchmarks/sandbox.py

# The full reproduction (about ten minutes on two cores), then its report and figures
# copied over the committed ones in docs/.
reproduce: venv
	$(BIN)/datasched reproduce ponce --out out/reproduce
	cp out/reproduce/report.md docs/reproduction-ponce.md
	cp out/reproduce/figures/*.csv out/reproduce/figures/*.png docs/figures/

# The reproduction of romosan's co-scheduling (a few minutes on two cores), likewise.
reproduce-romosan: venv
	$(BIN)/datasched reproduce romosan --out out/romosan
	sed 's|(figures/|(figures/romosan/|g' out/romosan/report.md > docs/reproduction-romosan.md
	mkdir -p docs/figures/romosan
	cp out/romosan/figures/*.csv out/romosan/figures/*.png docs/figures/romosan/

# The reproduction of Ranganathan & Foster's data grid (a few minutes on one core), likewise.
reproduce-grid: venv
	$(BIN)/datasched reproduce grid --out out/grid
	sed 's|(figures/|(figures/grid/|g' out/grid/report.md > docs/reproduction-grid.md
	mkdir -p docs/figures/grid
	cp out/grid/figures/*.csv out/grid/figures/*.png docs/figures/grid/

# Test hosts in network namespaces (root): a storage host serving the demo's data over XRootD,
# a Dask scheduler host, four worker hosts with caches of their own; it prints how to run jobs
# across them and how to cut or slow a link (docs/deployment.md). `make hosts-down` removes it.
hosts: venv
	PYTHONPATH=src $(BIN)/python tests/hosts_support.py up

hosts-down: venv
	PYTHONPATH=src $(BIN)/python tests/hosts_support.py down

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .coverage build dist
	find src -name '*.so' -delete
	rm -f $(COMPILED)
