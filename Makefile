# Set-up and the main jobs. `make bench` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Overridable for users with another build, e.g. make install TORCH_SPEC="torch==2.5.1".
TORCH_SPEC ?= torch==2.13.0
PRESET ?= quick

.PHONY: install bench report lint test test-fast clean-venv

install: $(VENV)/.installed

# Where a torch is already importable (a GPU machine), the venv sees it and it is used as it is;
# otherwise TORCH_SPEC is installed first, so pip never pulls a CUDA build from the registry.
$(VENV)/.installed: pyproject.toml
	@if $(PYTHON) -c "import torch" >/dev/null 2>&1; then \
		echo "using the torch already installed: $$($(PYTHON) -c 'import torch; print(torch.__version__)')"; \
		$(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
		$(PYTHON) -m venv $(VENV) && $(PY) -m pip install -q "$(TORCH_SPEC)"; \
	fi
	$(PY) -m pip install -q -e ".[test]"
	@touch $@

bench: install
	$(PY) -m bench run --preset $(PRESET) --device auto
	$(PY) -m bench paths --preset $(PRESET)
	$(PY) -m bench claims
	$(PY) -m bench report

report: install
	$(PY) -m bench report

# ruff (rules in pyproject.toml) and its formatter, then the tests.
lint: install
	$(PY) -m ruff check bench models tests
	$(PY) -m ruff format --check bench models tests

test: lint
	$(PY) -m pytest -q

# The inner loop: the lint and every test not marked slow (real sweeps, subprocesses, the claims).
test-fast: lint
	$(PY) -m pytest -q -m "not slow"

clean-venv:
	rm -rf $(VENV)
