"""Fixtures for the fleet-twin tests: real labs (root, namespaces, sshd), reached as an operator would.

``lab`` is one 3-node lab for the whole session (boot delay 0.5 s, MokManager timeout 1 s); tests that need a
fresh lab of their own (``down``, the NVIDIA boot contract) start one with ``start_lab``.
"""
from __future__ import annotations

import importlib
import os
import shutil
import sys

import pytest

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if LAB_DIR not in sys.path:
    sys.path.insert(0, LAB_DIR)

# the lab's lifecycle is shared with benchmarks/; the tests take these names from here
from gpulab.testkit.lab import (REPO_DIR, Lab, collections_path, lab_env, require_root, start_lab,  # noqa: E402,F401
                                stop_lab)

# Real-world captures: the collection's fixture store (provenance there), then the one capture only the twin's tests
# read (lab/tests/nvidia_fixtures/, provenance there).
FIXTURE_DIRS = (os.path.join(REPO_DIR, "tests", "unit", "fixtures", "nvidia_smi"),
                os.path.join(REPO_DIR, "tests", "unit", "fixtures", "kernel"),
                os.path.join(LAB_DIR, "tests", "nvidia_fixtures"))


def fixture_path(name: str) -> str:
    for directory in FIXTURE_DIRS:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError("fixture %s is in none of %s" % (name, ", ".join(FIXTURE_DIRS)))


@pytest.fixture(scope="session")
def needs_root():
    """For tests that need root without starting a lab (start_lab, hence ``lab``, checks by itself)."""
    require_root()


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("lab") / "state")
    running = start_lab(state_dir, "--nodes", "3", "--boot-delay", "0.5", "--mok-timeout", "1")
    yield running
    stop_lab(running)
    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)


@pytest.fixture(scope="session")
def collection_module_utils(tmp_path_factory):
    """``load(name)``: this checkout's ``ansible_collections.gpuops.nvidia.plugins.module_utils.<name>`` (the test
    is skipped when it does not import)."""
    tree = tmp_path_factory.mktemp("collection-tree")
    os.makedirs(tree / "ansible_collections" / "gpuops")
    os.symlink(REPO_DIR, str(tree / "ansible_collections" / "gpuops" / "nvidia"))
    sys.path.insert(0, str(tree))

    def load(name: str):
        try:
            return importlib.import_module("ansible_collections.gpuops.nvidia.plugins.module_utils." + name)
        except ImportError as error:
            pytest.skip("collection parsers not importable: %s" % error)
    return load
