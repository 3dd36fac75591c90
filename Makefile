# gradax: `make demo` runs the main job, `make test` runs the whole suite. Both set up .venv on first use.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
JOBS ?= 2

.PHONY: demo test lint bench venv clean docs docs-serve docs-check leaderboard

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

test: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples
	$(PY) -m pytest -n $(JOBS) --dist loadgroup

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples
	$(PY) -m ruff format --check src tests benchmarks examples

bench: $(STAMP)
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) runs .pytest_cache site
