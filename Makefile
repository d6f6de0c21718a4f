# Single entry point for developers and CI. Needs only Debian 12/13 with Python 3.11+ (root for the twin).
#   make test   sanity + units + lint + twin tests      make demo   the main job against the fleet twin
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
PYTEST_LAB ?= -q
STATE_DIR ?= $(CURDIR)/lab-state

.PHONY: help venv tree sanity units lint changelog-lint lab-test test demo clean

help:
	@echo "make test    sanity (ansible-test), units (ansible-test), ansible-lint (production), twin tests"
	@echo "make demo    start the fleet twin, run the diagnose playbook over it, stop the twin"
	@echo "make venv | sanity | units | lint | lab-test | clean"

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

tree: venv
	mkdir -p $(COLLECTION_DIR)
	rsync -a --delete \
	  --exclude .git --exclude /.venv --exclude /.tree --exclude /lab --exclude /lab-state \
	  --exclude /.ci --exclude /hack --exclude /benchmarks --exclude /tests/output \
	  --exclude __pycache__ --exclude .pytest_cache \
	  ./ $(COLLECTION_DIR)/

sanity: tree
	bash hack/ansible-test-offline-pip.sh
	cd $(COLLECTION_DIR) && $(BIN)/ansible-test sanity --color no --python $(SANITY_PYTHON)
	@# The modules run on the targets' Python (3.9+): compile them with every such interpreter found here
	@# (on PATH, or installed by pyenv, whose shims answer only for the selected version).
	@rm -rf $(TREE)/pythons && mkdir -p $(TREE)/pythons; \
	for version in $(TARGET_PYTHONS); do \
	  found=""; \
	  for candidate in $$(command -v python$$version) $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$$version.*/bin/python$$version 2>/dev/null); do \
	    if $$candidate -V >/dev/null 2>&1; then found=$$candidate; break; fi; \
	  done; \
	  if [ -z "$$found" ]; then echo "python$$version not found: compile check for it skipped"; continue; fi; \
	  ln -s "$$found" $(TREE)/pythons/python$$version; \
	  (cd $(COLLECTION_DIR) && PATH=$(TREE)/pythons:$$PATH $(BIN)/ansible-test sanity --color no --test compile --python $$version) || exit 1; \
	done

units: tree
	cd $(COLLECTION_DIR) && $(BIN)/ansible-test units --color no --python $(SANITY_PYTHON)

lint: tree
	cd $(COLLECTION_DIR) && PATH=$(BIN):$$PATH $(BIN)/ansible-lint --profile production
	$(BIN)/antsibull-changelog lint

lab-test: tree
	PYTHONPATH=$(CURDIR)/lab ANSIBLE_COLLECTIONS_PATH=$(TREE) PATH=$(BIN):$$PATH \
	  $(BIN)/python -m pytest $(PYTEST_LAB) lab/tests

test: sanity units lint lab-test

demo: tree
	PATH=$(BIN):$$PATH ANSIBLE_COLLECTIONS_PATH=$(TREE) bash lab/demo.sh $(STATE_DIR)

clean:
	rm -rf $(TREE) tests/output
