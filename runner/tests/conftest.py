"""The runner's unit tests import the package from runner/src and the collection's audit helpers from this
checkout (through a temporary ansible_collections/gpuops/nvidia symlink)."""
from __future__ import annotations

import os
import sys

import pytest

RUNNER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(RUNNER_DIR)
sys.path.insert(0, os.path.join(RUNNER_DIR, "src"))


@pytest.fixture(scope="session")
def collections_path(tmp_path_factory):
    tree = tmp_path_factory.mktemp("collections")
    os.makedirs(tree / "ansible_collections" / "gpuops")
    os.symlink(REPO_DIR, str(tree / "ansible_collections" / "gpuops" / "nvidia"))
    return str(tree)


@pytest.fixture(scope="session")
def chain(collections_path):
    from gpuops_runner import collection
    return collection.audit_api(collections_path)[0]


@pytest.fixture(scope="session")
def events(collections_path):
    from gpuops_runner import collection
    return collection.audit_api(collections_path)[1]
