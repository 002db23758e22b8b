# The commands people run daily. Each target sets up .venv first if requirements changed.
#   make lab         set up and open JupyterLab on work/ (the students' copy of notebooks/)
#   make instructor  JupyterLab on the whole repository with nbgrader's formgrader (instructors)
#   make test   set up and run every test (lint, library, graders, notebooks, nbgrader pipeline, nbval)
#   make quick  the inner loop (minutes): lint, the library, every check on a sample, structure

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# setuptools (shown by pip 26) prints a boxed "Editable installation" notice for `-e .` (in
# requirements.txt): information only, that a folder named encoder_lib in the current directory
# would be imported before the installed one. It is the same folder here; silenced, nothing else.
comma := ,
QUIET_SETUP := $(if $(PYTHONWARNINGS),$(PYTHONWARNINGS)$(comma))ignore:Editable installation:UserWarning
$(STAMP): export PYTHONWARNINGS := $(QUIET_SETUP)
# torch's CPU-only wheels; PyPI's Linux wheel brings ~3 GB of CUDA libraries instead.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# Jupyter refuses to start as root (containers, WSL, cloud machines) unless told it may.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
STUDENT_EDITION ?= build/student-edition
NBVAL := $(BIN)/python -m pytest --nbval --nbval-current-env \
	--nbval-sanitize-with tests/notebooks/nbval_sanitize.cfg -p no:cacheprovider solutions

.PHONY: setup lab instructor student-edition test quick lint nbval notebooks bench clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@if $(BIN)/python -c "import urllib.request as u; u.urlopen('$(TORCH_INDEX)/torch/', timeout=10)" \
		2>/dev/null; then \
		echo "Installing requirements.txt (torch: the CPU build from $(TORCH_INDEX))"; \
		$(BIN)/pip install --quiet --extra-index-url $(TORCH_INDEX) -r requirements.txt; \
	else \
		echo "$(TORCH_INDEX) is not reachable: installing torch from the default index"; \
		$(BIN)/pip install --quiet -r requirements.txt; \
	fi
	@echo "Installing requirements-nodeps.txt without the dependencies its packages declare"
	$(BIN)/pip install --quiet --no-deps -r requirements-nodeps.txt
	touch $(STAMP)

# Students: work/, their own copy of notebooks/ (tools/work_copy.py: the first run copies every
# notebook, later runs only the new ones, and never touch a file already there; git ignores
# work/, and `make notebooks`, nbgrader and `git pull` only write notebooks/). Served without
# nbgrader's instructor extensions (binder/jupyter/ holds the same settings Binder applies).
# LAB_ARGS passes more options, e.g. LAB_ARGS=--ip=0.0.0.0.
# The first notebook opens with the file browser at the root, where every notebook's folder is
# (JupyterLab's file-browser-path; without it the browser opens in the notebook's folder). The
# printed address is the root, which leads there: the server would print the home page's address
# with "?token=" glued after its own "?" (a link that asks for the token again).
WORK := work
LAB_HOME := /lab/tree/01_self_attention/01_self_attention.ipynb?file-browser-path=/
lab: setup
	@$(BIN)/python tools/work_copy.py notebooks $(WORK)
	@echo "JupyterLab serves $(WORK)/. Open the first http://...?token=... address it prints."
	JUPYTER_CONFIG_PATH="$(CURDIR)/binder/jupyter$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(BIN)/jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=$(WORK) \
		'--LabApp.default_url=$(LAB_HOME)' --ServerApp.custom_display_url=/ $(LAB_ARGS)

# Instructors: the whole repository (the nbgrader course directory) with the formgrader;
# tools/instructor_jupyter/ only switches JupyterLab's news toast off.
instructor: setup
	@echo "JupyterLab serves the course directory; the Nbgrader menu has the formgrader."
	JUPYTER_CONFIG_PATH="$(CURDIR)/tools/instructor_jupyter$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(BIN)/jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir=. $(LAB_ARGS)

# What a class publishes for its students (README, "Publish the student edition").
# REPO=you/your-course BRANCH=main put the real repository into its links.
student-edition: setup
	rm -rf $(STUDENT_EDITION)
	$(BIN)/python -m tools.student_edition build $(STUDENT_EDITION) \
		$(if $(REPO),--repo $(REPO)) $(if $(BRANCH),--branch $(BRANCH))

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Two lanes at once, both spending much of their time waiting on kernels, servers and browsers:
# the grading suites (the nbgrader pipeline and Dask: they grade classes, and the Dask suite checks
# that no grading kernel is left on the machine, so no other grading may run beside them) followed
# by nbval, and everything else. nbval re-executes every solution notebook and compares it with
# its committed outputs, written by another execution (`make notebooks`): two runs, in different
# processes and at different times, must agree. NBVAL_RUNS=3 repeats it (make test ran it three
# times until 2026-11-29, 3.2 min a run; a flaky output still fails one run in CI at each
# landing). It runs in the grading lane because that lane ends first. The lane writes
# logs/pytest-grading.log, printed when both are done. (pytest-xdist's groups do not work with
# pytest 9: its loadgroup scheduler renames node ids, which pytest 9 no longer lets it do.)
GRADING_SUITES := tests/pipeline tests/dask
NBVAL_RUNS ?= 1
test: lint
	@mkdir -p logs
	( $(BIN)/python -m pytest --durations=10 $(GRADING_SUITES) > logs/pytest-grading.log 2>&1; \
	  status=$$?; \
	  for run in $$(seq $(NBVAL_RUNS)); do echo "nbval run $$run of $(NBVAL_RUNS)"; \
	    $(NBVAL) || { status=$$((status + 100)); break; }; \
	  done >> logs/pytest-grading.log 2>&1; \
	  echo $$status > logs/pytest-grading.rc ) & \
	$(BIN)/python -m pytest --durations=25 $(addprefix --ignore=,$(GRADING_SUITES)); rest=$$?; \
	wait; echo "==== the grading suites ($(GRADING_SUITES)), then nbval x$(NBVAL_RUNS) ===="; \
	cat logs/pytest-grading.log; grading=$$(cat logs/pytest-grading.rc); \
	echo "exit status: grading suites + 100 if nbval failed: $$grading; the rest: $$rest"; \
	[ "$$rest" = 0 ] && [ "$$grading" = 0 ]

# The inner loop, a few minutes (docs/BENCHMARKS.md): lint, then pytest --quick (tests/conftest.py)
# in two lanes at once, the checks (tests/grading) beside everything else. --quick leaves out
# the slow suites (nbgrader pipeline, browser, Dask), nbval and the tests that start kernels,
# and tries each check on one variant per answer cell (the first listed: the same sample every
# run). `make test` runs all of it.
quick: lint
	@mkdir -p logs
	( $(BIN)/python -m pytest --quick -p no:cacheprovider tests/grading \
	    > logs/pytest-quick-grading.log 2>&1; echo $$? > logs/pytest-quick-grading.rc ) & \
	$(BIN)/python -m pytest --quick -p no:cacheprovider --ignore=tests/grading; rest=$$?; \
	wait; echo "==== the checks (tests/grading --quick) ===="; \
	tail -n 15 logs/pytest-quick-grading.log; grading=$$(cat logs/pytest-quick-grading.rc); \
	echo "exit status: tests/grading: $$grading; the rest: $$rest"; \
	[ "$$rest" = 0 ] && [ "$$grading" = 0 ]

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
	$(BIN)/python bench/bench_merge.py
	$(BIN)/python bench/bench_capstone.py
	$(BIN)/python bench/bench_decoder_demo.py
	$(BIN)/python bench/bench_jax.py
	$(BIN)/python bench/bench_real_encoder.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis gradebook.db
