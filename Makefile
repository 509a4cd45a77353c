# kchaos: `make chaos-acks1` runs the main job, `make test` the tests; both set up first.
PY     := .venv/bin/python
KCHAOS := .venv/bin/kchaos

.PHONY: setup test test-unit lint chaos-acks1 chaos-acksall chaos-nightly chaos-explore cluster-down clean lock lint-workflows docs

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest

test-unit: setup
	$(PY) -m pytest -m "not cluster"

# ruff, as pyproject.toml configures it (make test runs it too: tests/test_lint.py)
lint: setup
	.venv/bin/ruff check .

chaos-acks1: setup
	$(KCHAOS) run scenarios/acks1-leader-kill.yaml

chaos-acksall: setup
	$(KCHAOS) run scenarios/acksall-leader-kill.yaml

# every scenario with `nightly: true`, then runs/index.html (the matrix) and runs/junit.xml;
# SHARD=K/N runs only shard K of N (`kchaos matrix ROOT... --out DIR --junit FILE` merges the shards);
# KAFKA_VERSIONS="3.5.2 4.4.0" and CLIENT_VERSIONS="2.3.0 2.16.1" run each scenario on each release
chaos-nightly: setup
	$(KCHAOS) nightly --out runs --junit runs/junit.xml $(if $(SHARD),--shard $(SHARD)) \
	  $(foreach v,$(KAFKA_VERSIONS),--kafka-version $(v)) $(foreach v,$(CLIENT_VERSIONS),--client-version $(v))

# an exploration (docs/exploring.md): SPACE's trials for BUDGET minutes, each finding shrunk; into
# runs/explore/<space>/<time>/ (index.html, junit.xml, findings/)
SPACE  ?= spaces/txn-idempotence.yaml
BUDGET ?= 60
SEED   ?= 1
chaos-explore: setup
	$(KCHAOS) explore $(SPACE) --budget-min $(BUDGET) --seed $(SEED)

# refresh constraints.txt (the Python versions setup installs) from pyproject.toml, in a throw-away venv
lock:
	@bash scripts/lock.sh

# actionlint on .github/workflows (installs the `lint` extra into .venv the first time)
lint-workflows:
	@command -v actionlint >/dev/null || [ -x .venv/bin/actionlint ] || { [ -x .venv/bin/pip ] || python3 -m venv .venv; \
	  .venv/bin/pip install -q -c constraints.txt -e '.[lint]'; }
	@bash scripts/lint-workflows.sh

# the documentation site, offline, into site/ (strict: a broken link, a page not in the nav or a generated
# reference out of date fails it); installs the `docs` extra into .venv the first time, like make setup does
docs:
	@[ -x .venv/bin/mkdocs ] || { [ -x .venv/bin/pip ] || python3 -m venv .venv; \
	  .venv/bin/pip install -q -c constraints.txt -e '.[docs]'; }
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site

cluster-down:
	$(KCHAOS) cluster down

clean: cluster-down
	rm -rf runs .cache site

# the performance benchmarks at full size (benchmarks/README.md); each tears its cluster down
.PHONY: bench
bench: setup
	$(PY) benchmarks/cluster_lifecycle.py
	$(PY) benchmarks/producer_vs_kafka.py
	$(PY) benchmarks/harness_memory.py
