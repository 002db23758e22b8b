# The commands people run daily. Each target sets up .venv first if requirements changed.
#   make lab    set up and open JupyterLab on the first notebook
#   make test   set up and run every test (lint, library, graders, notebooks, nbgrader pipeline, nbval x3)
#   make quick  the same without the slow end-to-end suites and nbval

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NBVAL := $(BIN)/python -m pytest --nbval --nbval-current-env \
	--nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider solutions

.PHONY: setup lab test quick lint nbval notebooks bench clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $(STAMP)

lab: setup
	$(BIN)/jupyter lab notebooks/01_self_attention/01_self_attention.ipynb

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest
	# nbval: re-execute every solution notebook and compare with its committed outputs, three
	# times in a row to prove the outputs are deterministic.
	for run in 1 2 3; do echo "nbval run $$run of 3"; $(NBVAL) || exit 1; done

# The quick loop: everything but the slow end-to-end suites (nbgrader pipeline, browser, Dask)
# and nbval. CI runs `make test`, which includes them.
quick: lint
	$(BIN)/python -m pytest -m "not slow"

nbval: setup
	$(NBVAL)

# After editing solutions/: re-execute them (outputs are committed) and regenerate notebooks/.
notebooks: setup
	$(BIN)/python -m tools.build_course execute
	$(BIN)/python -m tools.build_course release

bench: setup
	$(BIN)/python bench/bench_encoder.py
	$(BIN)/python bench/bench_notebooks.py
	$(BIN)/python bench/bench_grading.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis gradebook.db
