"""DCGM on the node twins (``up --dcgm``): ``dcgmi diag -r N -j`` as the collection's ``dcgm_diag`` reads it, a test
failing under ``dcgm-fail:TEST[:GPU]``, and a GPU off the bus (Xid 79) that nvidia-smi reports lost and the
diagnostics fail; a lab without ``--dcgm`` has no dcgmi."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from conftest import REPO_DIR, collections_path, start_lab, stop_lab

NODE = "gpu-node-01"
DRIVER = "550.54.15"


@pytest.fixture(scope="module")
def dcgm_lab(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("dcgm") / "state")
    running = start_lab(state_dir, "--nodes", "1", "--dcgm", "--driver", DRIVER, "--boot-delay", "0.3")
    yield running
    stop_lab(running)
    shutil.rmtree(state_dir, ignore_errors=True)


def diag(lab, level):
    """(rc, {test name: {gpu: status}}) of dcgmi diag -r level -j on the node."""
    done = lab.ssh(NODE, "dcgmi diag -r %d -j" % level, check=False)
    text = done.stdout
    report = json.loads(text[text.index("{"):])["DCGM GPU Diagnostic"]
    tests = {test["name"]: {result["gpu_ids"]: result["status"] for result in test["results"]}
             for category in report["test_categories"] for test in category["tests"]}
    return done.returncode, tests


def test_diagnostics_pass_on_a_healthy_node_with_more_tests_per_level(dcgm_lab):
    rc1, level1 = diag(dcgm_lab, 1)
    rc3, level3 = diag(dcgm_lab, 3)
    assert rc1 == 0 and rc3 == 0
    assert "NVML Library" in level1 and "GPU Memory" not in level1
    assert {"PCIe", "GPU Memory", "Targeted Power", "SM Stress"} <= set(level3)
    assert all(status == "PASS" for results in level3.values() for status in results.values())
    assert set(level3["PCIe"]) == {str(index) for index in range(8)}


def test_an_injected_failure_fails_its_test_on_its_gpu_until_cleared(dcgm_lab):
    dcgm_lab.gpulab("fault", NODE, "dcgm-fail:memory:1")
    try:
        rc, tests = diag(dcgm_lab, 2)
        assert rc != 0
        assert tests["GPU Memory"]["1"] == "FAIL" and tests["GPU Memory"]["0"] == "PASS"
        assert diag(dcgm_lab, 1)[0] == 0   # level 1 runs no memory test
        path = collections_path()
        if path:
            done = dcgm_lab.ansible(NODE, "gpuops.nvidia.dcgm_diag", "level=2", check=False,
                                    env={"ANSIBLE_COLLECTIONS_PATH": path})
            assert done.returncode != 0 and "GPU Memory failed on GPU 1" in done.stdout, done.stdout
    finally:
        dcgm_lab.gpulab("clear", NODE, "dcgm-fail:memory:1")
    assert diag(dcgm_lab, 2)[0] == 0


def test_an_unknown_dcgm_test_is_refused(dcgm_lab):
    done = dcgm_lab.gpulab("fault", NODE, "dcgm-fail:warp-drive", check=False)
    assert done.returncode == 1 and "dcgm-fail:TEST[:GPU]" in done.stderr


def test_xid_79_makes_the_gpu_lost_for_nvidia_smi_and_fails_the_diagnostics(dcgm_lab):
    dcgm_lab.gpulab("fault", NODE, "xid:79:2")
    try:
        smi = dcgm_lab.ssh(NODE, "nvidia-smi -L", check=False)
        assert smi.returncode == 15 and "GPU is lost" in smi.stdout
        assert smi.stdout.count("GPU-") == 7
        rc, tests = diag(dcgm_lab, 3)
        assert rc != 0 and tests["NVML Library"]["2"] == "FAIL" and tests["NVML Library"]["0"] == "PASS"
    finally:
        dcgm_lab.gpulab("clear", NODE, "xid:79:2")
    assert diag(dcgm_lab, 3)[0] == 0


def test_a_lab_without_dcgm_has_no_dcgmi(tmp_path):
    lab = start_lab(str(tmp_path / "state"), "--nodes", "1", "--boot-delay", "0.3")
    try:
        assert lab.ssh(NODE, "command -v dcgmi", check=False).returncode == 1
    finally:
        stop_lab(lab)


def run_gate(lab, tmp_path, mode="auto"):
    """verify_node_host.yml's DCGM gate (playbooks/tasks/verify_dcgm.yml) on the node, with the runbook's settings
    (gpuops_settings: the spec's gpuops_dcgm_diag and gpuops_dcgm_diag_level) as the runbooks hold them: (rc,
    output)."""
    extra = json.dumps({"gpuops_settings": {"gpuops_dcgm_diag": mode, "gpuops_dcgm_diag_level": 2}})
    playbook = tmp_path / "gate.yml"
    playbook.write_text("- hosts: %s\n  gather_facts: false\n  tasks:\n    - ansible.builtin.include_tasks: %s\n"
                        % (NODE, os.path.join(REPO_DIR, "playbooks", "tasks", "verify_dcgm.yml")))
    argv = ["ansible-playbook", "-i", os.path.join(lab.state_dir, "inventory.yml"), str(playbook)]
    argv += ["-e", extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          env=dict(lab.env, ANSIBLE_COLLECTIONS_PATH=collections_path() or ""))
    return done.returncode, done.stdout + done.stderr


def test_the_verify_gate_fails_the_node_naming_the_test_and_is_skipped_when_off(dcgm_lab, tmp_path):
    if not collections_path():
        pytest.skip("the collection tree is not on ANSIBLE_COLLECTIONS_PATH")
    rc, out = run_gate(dcgm_lab, tmp_path)
    assert rc == 0 and "Run the DCGM diagnostics" in out, out
    dcgm_lab.gpulab("fault", NODE, "dcgm-fail:pcie:3")
    try:
        rc, out = run_gate(dcgm_lab, tmp_path)
        assert rc != 0 and "PCIe failed on GPU 3" in out, out
        rc, out = run_gate(dcgm_lab, tmp_path, "false")
        assert rc == 0 and "failed=0" in out, out
    finally:
        dcgm_lab.gpulab("clear", NODE, "dcgm-fail:pcie:3")
