# Salvage: `make demo` runs the product, `make test` runs the tests (both install first).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
RUNTIME := $(VENV)/.runtime-installed

.PHONY: install install-bench demo test lint types soak bench bench-claim bench-scrape bench-export bench-dashboard bench-api bench-manifest bench-browser bench-validation bench-db-latency bench-archive bench-sizing clean

install: $(STAMP)

# Scrapy, the peer in the scraping benchmark (CI installs it too, for the bench smoke tests).
install-bench: $(BENCH_STAMP)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e ".[dev,browser,bench]"
	touch $(BENCH_STAMP)

# The demo needs only the runtime dependencies: a fresh clone's `make demo` skips the test
# and browser tooling (Playwright alone is a large download) and pip's self-upgrade.
$(RUNTIME): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	touch $(RUNTIME)

$(STAMP): pyproject.toml $(RUNTIME)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,browser]"
	touch $(STAMP)

# make demo DEMO_PORT=8001 DEMO_DATA=/tmp/salvage-demo (any other flag: DEMO_ARGS='--pages 500')
DEMO_PORT ?= 8000
DEMO_DATA ?= $(if $(SALVAGE_DATA_DIR),$(SALVAGE_DATA_DIR),var)

demo: $(RUNTIME)
	SALVAGE_INSECURE_DEV_KEY=1 $(BIN)/python manage.py demo --port $(DEMO_PORT) \
		--data-dir $(DEMO_DATA) $(DEMO_ARGS)

test: install
	$(BIN)/pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy: the strict modules clean, no error that is not in .mypy-baseline.txt, and none of its
# errors fixed without shrinking it (scripts/mypy_baseline.py --update rewrites it).
types: install
	$(BIN)/python scripts/mypy_baseline.py

# The recovery drill as a soak: PostgreSQL, SOAK_KILLS random SIGKILLs of workers (on top of
# the three crash windows and the frozen worker) over a SOAK_TASKS-page run, and a database
# outage (connections refused, backends terminated) every SOAK_OUTAGE_EVERY seconds. Prints
# the drill's JSON report on one line; exits 0 only if every property and harm holds.
SOAK_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres
SOAK_TASKS ?= 20000
SOAK_KILLS ?= 1000
SOAK_OUTAGE_EVERY ?= 180
SOAK_OUTAGE_SECONDS ?= 10

soak: install
	DATABASE_URL=$(SOAK_DATABASE_URL) SALVAGE_INSECURE_DEV_KEY=1 $(BIN)/python manage.py drill \
		--tasks $(SOAK_TASKS) --kills $(SOAK_KILLS) --timeout 14400 \
		--db-outage-every $(SOAK_OUTAGE_EVERY) --db-outage-seconds $(SOAK_OUTAGE_SECONDS) --json

# Each bench ends with one JSON line, "headline": false when the box was busy (bench/README.md).
bench: bench-manifest bench-claim bench-scrape bench-export bench-dashboard bench-api bench-browser bench-validation bench-db-latency bench-archive bench-sizing

bench-manifest: install
	$(BIN)/python bench/manifest.py

bench-claim: install
	$(BIN)/python bench/claim.py

bench-scrape: install-bench
	$(BIN)/python bench/scrape.py

bench-export: install
	$(BIN)/python bench/export.py

bench-validation: install
	$(BIN)/python bench/validation.py $(BENCH_ARGS)

bench-dashboard: install
	$(BIN)/python bench/dashboard.py

# The API's rows pages and changes feed at 100,000 and 10,000,000 observations (issue 28).
bench-api: install
	$(BIN)/python bench/api.py $(BENCH_ARGS)

bench-browser: install
	$(BIN)/python bench/browser.py $(BENCH_ARGS)

# Workers a network hop from PostgreSQL: 1 ms and 10 ms each way through a loopback proxy.
bench-db-latency: install
	$(BIN)/python bench/db_latency.py $(BENCH_ARGS)

# Re-extraction from the page archive against refetching, and the archive's bytes per page.
bench-archive: install
	$(BIN)/python bench/archive.py $(BENCH_ARGS)

# docs/production.md's sizing table: memory, connections, database CPU and bytes per page.
bench-sizing: install
	$(BIN)/python bench/sizing.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var

# `make help`: every target in one screen (tests/unit/test_make_help.py keeps it complete).
.PHONY: help
help:
	@echo "make install          .venv with the runtime, dev and browser extras (first target: plain 'make')"
	@echo "make install-bench    install, plus Scrapy for the scraping benchmark"
	@echo "make demo             the one-command demo on SQLite (DEMO_PORT, DEMO_DATA, DEMO_ARGS)"
	@echo "make test             the test suite (PYTEST_ARGS; DATABASE_URL=postgres://... for PostgreSQL)"
	@echo "make lint             ruff check and ruff format --check"
	@echo "make types            mypy: strict modules clean, no error beyond .mypy-baseline.txt"
	@echo "make soak             the recovery drill as a soak on PostgreSQL (SOAK_* variables)"
	@echo "make bench            every benchmark; one alone: make bench-NAME, NAME one of"
	@echo "                      manifest claim scrape export validation dashboard api browser db-latency archive sizing"
	@echo "make clean            remove .venv and var/"
	@echo "make help             this list"
	@echo "Deployment (systemd, Procfile, compose, nginx): docs/production.md"
