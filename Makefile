# datasched: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint format bench reproduce reproduce-romosan reproduce-grid clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all]'
	touch $(STAMP)

demo: venv
	$(BIN)/datasched demo
	$(BIN)/datasched demo-service

# The tests run in two processes (pytest-xdist), each test module in one of them, so that a
# module's shared fixtures (a cluster, a quick reproduction) are built once.
TEST_PROCESSES ?= 2

test: venv lint
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadscope

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src

format: venv
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

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

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist
