# gradax: `make demo` runs the main job, `make test` runs `make lint` and then the whole suite. All set up .venv on first
# use.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
JOBS ?= 2

.PHONY: demo test test-oldest-jax lint bench venv clean docs docs-serve docs-check leaderboard

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[cli,test]"
	@rm -f $(VENV)/.installed-*; touch $(STAMP)

venv: $(STAMP)

DOCS_STAMP := $(VENV)/.docs-installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[cli,test,docs]"
	@rm -f $(VENV)/.docs-installed-*; touch $(DOCS_STAMP)

# the documentation site (MkDocs Material + mkdocstrings), built into site/ in strict mode
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 JAX_PLATFORMS=cpu $(PY) -m mkdocs build --strict --clean

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 JAX_PLATFORMS=cpu $(PY) -m mkdocs serve

# the built site in headless Debian chromium: pages, images, console errors, search; screenshots in site/_screenshots/
docs-check: docs
	$(PY) docs/_scripts/browser_check.py site

demo: $(STAMP)
	$(PY) -m gradax.cli demo

leaderboard: $(STAMP)
	$(PY) -m gradax.cli leaderboard --out runs/leaderboard --overwrite

test: lint
	$(PY) -m pytest -n $(JOBS) --dist loadgroup

# the oldest JAX gradax supports (Optax 0.2.8's floor, jax 0.5.3), pinned in .ci/oldest-jax.txt, in its own venv:
# the contract battery's structure and Optax-oracle checks (every registered transformation) and the registry test
OLDEST := .venv-oldest-jax
OLDEST_STAMP := $(OLDEST)/.installed-$(shell cat pyproject.toml .ci/oldest-jax.txt | cksum | cut -d' ' -f1)

$(OLDEST_STAMP): pyproject.toml .ci/oldest-jax.txt
	@test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python -m pip install --quiet -c .ci/oldest-jax.txt -e . jax jaxlib numpy optax equinox pytest \
		pytest-xdist hypothesis
	@rm -f $(OLDEST)/.installed-*; touch $(OLDEST_STAMP)

test-oldest-jax: $(OLDEST_STAMP)
	$(OLDEST)/bin/python -c "import jax; assert jax.__version__ == '0.5.3', jax.__version__"
	$(OLDEST)/bin/python -m pytest -n $(JOBS) --dist loadgroup tests/contract/test_registry.py \
		tests/contract/test_battery.py -k "test_contract or test_oracle or test_registry or test_every"

# the same checks as .pre-commit-config.yaml: lint (with unused-noqa), formatting, and types of src/gradax (Pyrefly,
# configured in pyproject.toml)
lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples docs/_scripts
	$(PY) -m ruff format --check src tests benchmarks examples docs/_scripts
	$(VENV)/bin/pyrefly check

bench: $(STAMP)
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) $(OLDEST) runs .pytest_cache site
