# Single entry point for developers and CI. Needs only Debian 12/13 with Python 3.11+ (root for the twin and for
# `make deps` to install the system packages of hack/apt-packages.txt; NO_DEPS=1 skips that check).
#   make test   sanity + units + lint + twin tests      make demo   the main job against the fleet twin
#   make test-matrix   units + diagnose twin run on the lowest and newest ansible-core the collection claims
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
# ansible-test needs the collection at .../ansible_collections/gpuops/nvidia; we test a copy of the content there.
TREE ?= $(or $(TMPDIR),/tmp)/gpuops-nvidia-$(shell printf %s "$(CURDIR)" | md5sum | cut -c1-8)
COLLECTION_DIR := $(TREE)/ansible_collections/gpuops/nvidia
SANITY_PYTHON ?= 3.11
TARGET_PYTHONS ?= 3.9 3.10 3.12 3.13
PYTEST_LAB ?= -q -n 3 --dist loadfile --no-loadscope-reorder --durations=25
# fleet-size twin tests (pytest.mark.fleet: 16 nodes, about 10 min on one worker) run outside CI: make lab-test-fleet
STATE_DIR ?= $(CURDIR)/lab-state
APT_PACKAGES ?= hack/apt-packages.txt
# <ansible-core minor>:<python>: the floor of meta/runtime.yml and the newest requirements.txt allows
MATRIX ?= 2.16:3.11 2.21:3.13

.PHONY: help deps venv tree sanity units lint changelog-lint lab-test lab-test-fleet release-check docs test test-matrix demo clean chaos

help:
	@echo "make test    sanity (ansible-test), units (ansible-test), ansible-lint (production), twin tests"
	@echo "make demo    start the fleet twin, run the driver upgrade runbook over it (plan, then confirmed), stop the twin"
	@echo "make test-matrix   unit tests + diagnose twin run on ansible-core $(MATRIX) (own venvs .venv-ac*)"
	@echo "make release-check   build the tarball, install it, ansible-doc every plugin, syntax-check every runbook"
	@echo "make docs    the docs site (antsibull-docs + Sphinx) into $(DOCS_DEST), failing on any warning"
	@echo "make lab-test-fleet   the fleet-size twin tests (16 nodes; outside CI, about 10 min)"
	@echo "make deps | venv | sanity | units | lint | lab-test | clean"

deps:
ifndef NO_DEPS
	@bash hack/deps.sh $(APT_PACKAGES)
endif

$(VENV)/.installed: requirements.txt requirements-dev.txt | deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

tree: venv
	$(BIN)/python hack/sync-tree.py . $(COLLECTION_DIR)

sanity: tree
	bash hack/ansible-test-offline-pip.sh
	cd $(COLLECTION_DIR) && $(BIN)/ansible-test sanity --color no --python $(SANITY_PYTHON)
	@# The modules run on the targets' Python (3.9+): compile them with every such interpreter found here
	@# (on PATH, or installed by pyenv, whose shims answer only for the selected version).
	@rm -rf $(TREE)/pythons && mkdir -p $(TREE)/pythons; \
	for version in $(TARGET_PYTHONS); do \
	  if ! found=$$(hack/find-python.sh $$version); then echo "python$$version not found: compile check for it skipped"; continue; fi; \
	  ln -s "$$found" $(TREE)/pythons/python$$version; \
	  (cd $(COLLECTION_DIR) && PATH=$(TREE)/pythons:$$PATH $(BIN)/ansible-test sanity --color no --test compile --python $$version) || exit 1; \
	done

units: tree
	cd $(COLLECTION_DIR) && $(BIN)/ansible-test units --color no --python $(SANITY_PYTHON)
	@# the gpuops runner (runner/, a pip package beside the collection) has its own unit tests
	$(BIN)/python -m pytest -q -p no:cacheprovider runner/tests

lint: tree
	cd $(COLLECTION_DIR) && PATH=$(BIN):$$PATH $(BIN)/ansible-lint --profile production
	$(BIN)/antsibull-changelog lint
	$(BIN)/python hack/role_docs.py --check
	$(BIN)/python hack/runbook_docs.py --check
	@# the plugin and role docs and the docs site's own pages, as the Ansible docsite's linter reads them
	cd $(COLLECTION_DIR) && PATH=$(BIN):$$PATH ANSIBLE_COLLECTIONS_PATH=$(TREE) $(BIN)/antsibull-docs lint-collection-docs --plugin-docs .

lab-test: tree
	PYTHONPATH=$(CURDIR)/lab ANSIBLE_COLLECTIONS_PATH=$(TREE) PATH=$(BIN):$$PATH \
	  $(BIN)/python -m pytest $(PYTEST_LAB) -m "not fleet" lab/tests

lab-test-fleet: tree
	PYTHONPATH=$(CURDIR)/lab ANSIBLE_COLLECTIONS_PATH=$(TREE) PATH=$(BIN):$$PATH \
	  $(BIN)/python -m pytest $(PYTEST_LAB) -m fleet lab/tests

# ~15 s: build the tarball, install it into an empty collections path, ansible-doc and syntax-check from there
release-check: venv
	bash hack/release-check.sh $(BIN)

# the docs site (antsibull-docs + Sphinx, offline), failing on any warning but the offline intersphinx ones
DOCS_DEST ?= $(TREE)-docs
docs: tree
	bash hack/docs-build.sh $(TREE) $(DOCS_DEST) $(BIN)

test: deps sanity units lint release-check lab-test

test-matrix: deps tree
	bash hack/test-matrix.sh $(TREE) $(MATRIX)

demo: deps tree
	PATH=$(BIN):$$PATH ANSIBLE_COLLECTIONS_PATH=$(TREE) bash lab/demo.sh $(STATE_DIR)

clean:
	rm -rf $(TREE) tests/output

# the chaos soak of the driver roll-out (benchmarks/chaos.py, root): one round per seed, results in
# benchmarks/results/chaos/<seed>.json and benchmarks/results/chaos.md; CHAOS_NODES=4 fixes the fleet size,
# CHAOS_JOBS=3 runs three rounds at once (each on its own twin), CHAOS_KINDS=connections adds the API server restart and early-closed watches, CHAOS_KINDS=ssh those and ssh-cut, CHAOS_KINDS=restarts those and api-down
SEEDS ?= 1
CHAOS_NODES ?=
CHAOS_JOBS ?=
chaos: deps tree
	PYTHONPATH=$(CURDIR)/lab ANSIBLE_COLLECTIONS_PATH=$(TREE) PATH=$(BIN):$$PATH \
	  $(BIN)/python benchmarks/chaos.py --seeds $(SEEDS) $(if $(CHAOS_NODES),--nodes $(CHAOS_NODES)) $(if $(CHAOS_KINDS),--kinds $(CHAOS_KINDS)) $(if $(CHAOS_JOBS),--jobs $(CHAOS_JOBS))
