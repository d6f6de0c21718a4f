"""The precheck role on twin nodes over SSH: a node fit to become a GPU node passes, a node with a full disk,
no kernel headers and a driver too old for the requested CUDA is refused once, with every reason and its remedy.

One 2-node lab. Both nodes are made to look joined (the kubelet's device-plugin directory) since the twin's
nodes are not kubeadm nodes yet; gpu-node-02 then gets the faults.
"""
from __future__ import annotations

import os

import pytest

from conftest import start_lab, stop_lab
from roles_on_twin import recap, run_role

GOOD, BAD = "gpu-node-01", "gpu-node-02"
RUNNING_KERNEL = os.uname().release


@pytest.fixture(scope="module")
def precheck(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("precheck") / "state")
    lab = start_lab(state_dir, "--nodes", "2", "--boot-delay", "0.3")
    work = str(tmp_path_factory.mktemp("precheck-play"))
    try:
        for node in (GOOD, BAD):
            lab.ssh(node, "mkdir -p /var/lib/kubelet/device-plugins")
        lab.ssh(BAD, "rm /lib/modules/%s/build" % RUNNING_KERNEL)
        lab.gpulab("fault", BAD, "disk-full")
        role_vars = {"precheck_driver_version": "575.57.08", "precheck_cuda_version": "13.0"}
        runs = {"bad": run_role(lab, "precheck", role_vars, work, hosts=BAD),
                "good": run_role(lab, "precheck", {"precheck_driver_version": "615.71.09",
                                                   "precheck_cuda_version": "13.0"}, work, hosts=GOOD,
                                 result_var="ansible_facts.gpu_node_precheck")}
        runs["bad_files"] = lab.ssh(BAD, "ls /var/lib /etc/modprobe.d").stdout
        yield runs
    finally:
        lab.gpulab("clear", BAD, "disk-full", check=False)
        stop_lab(lab)


def failure_of(output: str, host: str) -> str:
    marker = "fatal: [%s]" % host
    assert marker in output, output[-3000:]
    return output[output.index(marker):]


def test_a_node_with_several_problems_fails_once_listing_every_unmet_requirement(precheck):
    output = precheck["bad"]["output"]
    failure = failure_of(output, BAD)
    assert "%s does not meet 5 requirement(s)" % BAD in failure
    for code in ("disk_free_low", "kernel_headers_missing", "driver_too_old_for_cuda"):
        assert "[%s]" % code in failure, failure
    # every checked path lives on the node's full disk except /tmp (its own tmpfs): /var, /usr and /boot
    assert failure.count("[disk_free_low]") == 3
    assert recap(output, BAD)["failed"] == 1


def test_each_reason_comes_with_its_remedy(precheck):
    failure = failure_of(precheck["bad"]["output"], BAD)
    assert "CUDA 13.0 needs driver 580.65.06 or newer" in failure and "Request driver 580.65.06 or newer" in failure
    assert "No kernel headers for the running kernel %s" % RUNNING_KERNEL in failure
    assert "Install the headers package of the running kernel (linux-headers-%s" % RUNNING_KERNEL in failure
    assert "Free space on /." in failure


def test_the_fit_node_passes(precheck):
    assert recap(precheck["good"]["output"], GOOD)["failed"] == 0
    verdict = precheck["good"]["results"][GOOD]["verdict"]
    assert verdict["ok"] is True and verdict["unmet"] == []


def test_the_report_carries_the_decisions_the_other_roles_take(precheck):
    report = precheck["good"]["results"][GOOD]
    assert {device["generation"] for device in report["pci_devices"]} == {"hopper"}
    assert report["verdict"]["kernel_module_type"] == "open"
    # the twin's nodes run Debian 12's containerd 1.6: no CDI, and the report says so
    assert report["containerd"]["version"].startswith("1.6.")
    assert report["verdict"]["container_runtime_path"] == "legacy"
    assert "containerd_legacy_only" in [note["code"] for note in report["verdict"]["notes"]]
    assert "nouveau_loaded" in [note["code"] for note in report["verdict"]["notes"]]
    assert report["kubelet"]["device_plugin_dir"] == "/var/lib/kubelet/device-plugins"


def test_precheck_changes_nothing(precheck):
    assert "gpuops" not in precheck["bad_files"]
    assert recap(precheck["good"]["output"], GOOD)["changed"] == 0
