# Set-up and the main jobs. `make bench` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Overridable for users with another build, e.g. make install TORCH_SPEC="torch==2.5.1".
TORCH_SPEC ?= torch==2.13.0
PRESET ?= quick

.PHONY: install bench report compare reference-report lint test test-fast browser clean-venv

install: $(VENV)/.installed

# Where a torch is already importable (a GPU machine), the venv sees it and it is used as it is;
# otherwise TORCH_SPEC is installed first, so pip never pulls a CUDA build from the registry. make bench installs
# what it runs; the test and ray extras (run --ray's tests, tests/test_cluster.py) come with make test: 39 s of
# pip on the 2-core VM that bench need not wait for.
# pip compiles nothing (--no-compile: 18 s + 32 s of pip on the 2-core VM, not 71 s + 80 s): Python writes the bytecode
# of what bench imports as it first imports it, here even where PYTHONDONTWRITEBYTECODE is set (else each start of a
# command would compile torch again: 5 s).
export PYTHONDONTWRITEBYTECODE :=
# A line every 10 s while pip works quietly, so that a log of make bench shows progress through the install too.
PIP_TICKING = start=$$(date +%s); (while sleep 10; do echo "install: $$(($$(date +%s) - start)) s, still installing"; done) & \
	ticker=$$!; trap 'kill $$ticker 2>/dev/null' EXIT; set -e
$(VENV)/.installed: pyproject.toml
	@$(PIP_TICKING); \
	if $(PYTHON) -c "import torch" >/dev/null 2>&1; then \
		echo "using the torch already installed: $$($(PYTHON) -c 'import torch; print(torch.__version__)')"; \
		$(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
		echo "install: $(TORCH_SPEC) into $(VENV)"; \
		$(PYTHON) -m venv $(VENV) && $(PY) -m pip install -q --no-compile "$(TORCH_SPEC)"; \
	fi; \
	echo "install: this project"; \
	$(PY) -m pip install -q --no-compile -e .; \
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	@$(PIP_TICKING); \
	echo "install: the test and ray extras"; \
	$(PY) -m pip install -q -e ".[test,ray]"; \
	touch $@

# bench, report and compare write this machine's report to reports/local/ (git ignores it); no tracked file changes.
bench: install
	$(PY) -m bench run --preset $(PRESET) --device auto
	$(PY) -m bench paths --preset $(PRESET)
	$(PY) -m bench claims
	$(PY) -m bench report

report: install
	$(PY) -m bench report

# This machine's runs beside the reference runs that ship in results/reference/, each machine apart.
compare: install
	$(PY) -m bench report --compare reference

# For maintainers, after a reference run is added: the shipped report (tracked) regenerated from results/reference/.
reference-report: install
	$(PY) -m bench report --results results/reference --out reports/reference

# ruff (rules in pyproject.toml) and its formatter, then the tests.
lint: $(VENV)/.installed-test
	$(PY) -m ruff check bench models tests
	$(PY) -m ruff format --check bench models tests

# The suite on TEST_WORKERS pytest-xdist workers, a test file to a worker (its module fixtures built once);
# TEST_WORKERS=0 runs it in this process alone.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: lint
	$(PYTEST)

# The inner loop: the lint and every test not marked slow (real sweeps, subprocesses, the claims).
test-fast: lint
	$(PYTEST) -m "not slow"

# Debian's chromium for the browser test (tests/test_report_browser.py), installed when missing. Never fails:
# without apt-get, root (or password-less sudo) or the network it says why, and the browser test skips.
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300
browser:
	@if command -v chromium >/dev/null 2>&1; then \
		echo "browser: chromium is already installed: $$(command -v chromium)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "browser: chromium is missing and there is no apt-get (not Debian?): install Chromium yourself; the browser test skips"; \
	else \
		if [ "$$(id -u)" = 0 ]; then SUDO=; \
		elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
		else echo "browser: chromium is missing and installing it needs root: sudo apt-get install chromium; the browser test skips"; exit 0; fi; \
		echo "browser: installing Debian's chromium (apt-get update; apt-get install -y chromium)"; \
		if $$SUDO env $(APT_INSTALL) update >/tmp/make-browser-apt.log 2>&1 \
			&& $$SUDO env $(APT_INSTALL) install -y chromium >>/tmp/make-browser-apt.log 2>&1 \
			&& command -v chromium >/dev/null 2>&1; then \
			echo "browser: installed $$(chromium --version 2>/dev/null) at $$(command -v chromium)"; \
		else \
			echo "browser: apt-get could not install chromium (log: /tmp/make-browser-apt.log); the browser test skips:"; \
			tail -n 5 /tmp/make-browser-apt.log | sed 's/^/  /'; \
		fi; \
	fi

clean-venv:
	rm -rf $(VENV)
