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


# `make lab-test` hands whole files to its workers (--dist loadfile) in collection order (--no-loadscope-reorder:
# pytest-xdist would otherwise start the files with the most tests first, and a one-test file that runs for
# minutes last, alone). The files that take minutes go first, longest first, so the suite ends with short files.
LONGEST_FIRST = (
    "test_runbook_upgrade_packages.py", "test_runbook_batch_faults.py", "test_runbook_upgrade_mig.py",
    "test_chaos_sample.py", "test_runbook_node_bootstrap.py", "test_runbook_upgrade_faults.py",
    "test_runbook_driver_upgrade.py", "test_role_nvidia_driver.py", "test_runbook_operator_upgrade.py",
    "test_runbook_repair_device_plugin.py", "test_runbook_repair_selfcheck.py", "test_node_selfcheck.py",
    "test_change_kubelet_config.py", "test_runbook_upgrade_dcgm.py", "test_runbook_upgrade_mig_operator.py",
    "test_change_mig_layout.py", "test_runbook_repair_xid79.py",
    "test_runbook_repair_skew_reload.py", "test_alertmanager_silence.py",
    "test_runbook_bootstrap_batches.py", "test_hardening_lock_rbac.py",
    "test_runbook_upgrade_multinode.py", "test_runner_upgrade_bastion.py", "test_lab_gpu_operator.py",
    "test_chaos_seed_2008.py", "test_chaos_seed_214.py", "test_chaos_seed_364.py", "test_chaos_seed_15.py",
    "test_chaos_ssh_cut.py", "test_gates_drain.py",
)


# Fleet-size tests (16 nodes and more; minutes each on one worker) carry ``pytest.mark.fleet``: `make lab-test` (CI)
# leaves them out, `make lab-test-fleet` runs them, as it runs the benchmarks and the chaos soak, outside CI's time.
def pytest_configure(config):
    config.addinivalue_line("markers", "fleet: a fleet-size twin test, run by make lab-test-fleet, not by CI")


def pytest_collection_modifyitems(items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(rank)))


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
