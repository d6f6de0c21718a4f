# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import copy
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.host import precheck

HOST_FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "host"))


def host_fixture(name):
    with open(os.path.join(HOST_FIXTURES, name)) as stream:
        return stream.read()


H100 = {"address": "0000:18:00.0", "vendor_id": "0x10de", "device_id": "0x2330", "class_id": "0x030200",
        "driver": "nvidia"}
HEALTHY = {
    "pci_devices": [dict(H100, address="0000:%02x:00.0" % bus) for bus in (0x18, 0x2a)],
    "nouveau_loaded": False,
    "secure_boot": {"enabled": True, "efi": True},
    "mok": {"certificate_path": "/var/lib/gpuops/mok/MOK.der", "key_present": True, "enrolled": True, "pending": False,
            "tools": {"openssl": True, "mokutil": True}},
    "kernel": {"running": "6.8.0-45-generic", "running_headers": True, "newest_installed": "6.8.0-45-generic",
               "newest_headers": True},
    "containerd": {"present": True, "version": "1.7.20"},
    "kubelet": {"root_dir": "/var/lib/kubelet", "device_plugin_dir": "/var/lib/kubelet/device-plugins",
                "device_plugin_dir_present": True},
    "disks": [{"path": "/var", "mount": "/", "free_mib": 40000, "min_free_mib": 2048},
              {"path": "/boot", "mount": "/boot", "free_mib": 700, "min_free_mib": 256}],
    "swap": [],
    "hugepages": {"total": 0, "free": 0, "size_kib": 2048},
}
REQUEST = {"driver_version": "580.95.05", "cuda_version": "13.0"}


def with_changes(**changes):
    facts = copy.deepcopy(HEALTHY)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(facts.get(key), dict):
            facts[key].update(value)
        else:
            facts[key] = value
    return facts


def codes(findings):
    return [finding["code"] for finding in findings]


def test_a_healthy_node_passes_with_the_decisions():
    verdict = precheck.evaluate(HEALTHY, REQUEST)
    assert verdict == {"ok": True, "unmet": [], "notes": verdict["notes"], "kernel_module_type": "open",
                       "container_runtime_path": "cdi"}
    assert codes(verdict["notes"]) == ["mok_enrolled"]


def test_every_unmet_requirement_is_listed_not_the_first():
    facts = with_changes(
        kernel={"running_headers": False, "newest_installed": "6.8.0-49-generic", "newest_headers": False},
        disks=[{"path": "/var", "mount": "/", "free_mib": 12, "min_free_mib": 2048},
               {"path": "/tmp", "mount": "/tmp", "free_mib": 100, "min_free_mib": 768}],
        swap=[{"device": "/swap.img", "size_kib": 4194300}],
        kubelet={"device_plugin_dir_present": False},
        containerd={"version": "1.6.20"},
    )
    verdict = precheck.evaluate(facts, dict(REQUEST, driver_version="575.57.08", container_runtime_path="cdi",
                                            hugepages_total=1024))
    assert not verdict["ok"]
    assert codes(verdict["unmet"]) == [
        "driver_too_old_for_cuda", "kernel_headers_missing", "kernel_headers_missing_next_boot",
        "containerd_too_old_for_cdi", "kubelet_device_plugin_dir_missing", "disk_free_low", "disk_free_low",
        "swap_on", "hugepages_mismatch"]
    assert all(finding["remedy"] for finding in verdict["unmet"])
    message = precheck.failure_message("gpu-node-02", verdict)
    assert message.startswith("gpu-node-02 does not meet 9 requirement(s) of a GPU node:\n1. [driver_too_old_for_cuda]")
    assert "9. [hugepages_mismatch] HugePages_Total is 0, 1024 configured. Remedy: Set vm.nr_hugepages=1024" in message
    assert "/var (on /) has 12 MiB free, 2048 MiB needed. Remedy: Free space on /." in message
    assert "Kernel 6.8.0-49-generic is installed and will run at the next boot, but has no headers" in message


def test_no_gpu_is_unmet():
    verdict = precheck.evaluate(with_changes(pci_devices=[]), REQUEST)
    assert codes(verdict["unmet"]) == ["no_nvidia_gpu"] and verdict["kernel_module_type"] is None


def test_nouveau_is_a_note_the_driver_role_acts_on():
    verdict = precheck.evaluate(with_changes(nouveau_loaded=True), REQUEST)
    assert verdict["ok"] and "nouveau_loaded" in codes(verdict["notes"])


def test_cuda_13_on_volta_is_refused_and_the_flavour_must_be_proprietary():
    volta = [dict(H100, device_id="0x1db1")]
    verdict = precheck.evaluate(with_changes(pci_devices=volta), dict(REQUEST, kernel_module_type="open"))
    assert codes(verdict["unmet"]) == ["kernel_module_type_unsupported", "cuda_unsupported_gpu"]
    assert precheck.evaluate(with_changes(pci_devices=volta), {"driver_version": "580.95.05"})[
        "kernel_module_type"] == "proprietary"


def test_a_driver_branch_past_the_gpus_support_is_refused():
    verdict = precheck.evaluate(with_changes(pci_devices=[dict(H100, device_id="0x1db1")]),
                                {"driver_version": "590.44.01"})
    assert codes(verdict["unmet"]) == ["driver_unsupported_gpu"]
    assert "branch 580 is the last with Volta support" in verdict["unmet"][0]["message"]


def test_malformed_versions_are_named():
    verdict = precheck.evaluate(HEALTHY, {"driver_version": "latest", "cuda_version": "thirteen"})
    assert codes(verdict["unmet"]) == ["driver_version_malformed", "cuda_version_malformed"]


@pytest.mark.parametrize("mok, secure_boot, request_extra, unmet, notes", [
    ({"key_present": False, "enrolled": None, "pending": None}, True, {}, [], ["mok_to_stage"]),
    ({"enrolled": False, "pending": True}, True, {}, [], ["mok_enrollment_pending"]),
    ({"key_present": False, "enrolled": None}, True, {"allow_key_creation": False}, ["secure_boot_no_signing_key"], []),
    ({"key_present": True, "enrolled": False, "pending": False}, True, {"allow_key_enrollment": False},
     ["secure_boot_key_not_enrolled"], []),
    ({"key_present": True, "enrolled": False, "pending": True}, True, {"allow_key_enrollment": False},
     ["secure_boot_key_not_enrolled"], []),
    ({"key_present": False, "enrolled": None}, True, {"allow_key_enrollment": False},
     ["secure_boot_key_not_enrolled"], []),
    ({"key_present": False, "enrolled": None}, True, {"allow_key_enrollment": False, "allow_key_creation": False},
     ["secure_boot_no_signing_key"], []),
    ({"key_present": True, "enrolled": True}, True, {"allow_key_enrollment": False}, [], ["mok_enrolled"]),
    ({"key_present": True, "enrolled": False}, False, {"allow_key_enrollment": False}, [], []),
    ({"key_present": False, "enrolled": None, "tools": {"openssl": False, "mokutil": False}}, True, {},
     ["secure_boot_tools_missing"], []),
    ({"enrolled": False}, True, {"secure_boot_sign": "never"}, ["secure_boot_signing_disabled"], []),
    ({"key_present": False, "enrolled": None}, False, {}, [], []),
    ({"key_present": False, "enrolled": None, "tools": {"openssl": True, "mokutil": False}}, False,
     {"secure_boot_sign": "always"}, [], ["mok_to_stage"]),
])
def test_secure_boot_signing_path(mok, secure_boot, request_extra, unmet, notes):
    facts = with_changes(mok=mok, secure_boot={"enabled": secure_boot})
    verdict = precheck.evaluate(facts, dict(REQUEST, **request_extra))
    assert codes(verdict["unmet"]) == unmet
    assert [code for code in codes(verdict["notes"]) if code.startswith(("mok", "secure"))] == notes


@pytest.mark.parametrize("version, request_extra, path, unmet, notes", [
    ("1.7.20", {}, "cdi", [], []),
    ("2.0.0", {"gpu_operator": True}, "cdi", [], []),
    ("1.7.20", {"gpu_operator": True}, "cdi", ["containerd_too_old_for_gpu_operator"], []),
    ("1.6.20", {}, "legacy", [], ["containerd_legacy_only"]),
    ("1.6.20", {"container_runtime_path": "cdi"}, None, ["containerd_too_old_for_cdi"], []),
    ("1.7.20", {"container_runtime_path": "legacy"}, "legacy", [], []),
])
def test_containerd_version_decides_the_runtime_path(version, request_extra, path, unmet, notes):
    verdict = precheck.evaluate(with_changes(containerd={"version": version}), dict(REQUEST, **request_extra))
    assert verdict["container_runtime_path"] == path
    assert codes(verdict["unmet"]) == unmet
    assert [code for code in codes(verdict["notes"]) if code.startswith("containerd")] == notes


def test_missing_containerd_is_unmet_unless_not_required():
    facts = with_changes(containerd={"present": False, "version": None})
    assert codes(precheck.evaluate(facts, REQUEST)["unmet"]) == ["containerd_missing"]
    assert precheck.evaluate(facts, dict(REQUEST, require_containerd=False))["ok"]


@pytest.mark.parametrize("text, version", [
    (host_fixture("containerd-version_1.6.20_debian12.txt"), "1.6.20"),
    ("containerd containerd.io 1.7.20 8fc6bcff51318944179630522a095cc9dbf9f353\n", "1.7.20"),
    ("containerd github.com/containerd/containerd/v2 v2.0.0 207ad711eabd375a7e4b0b0c5c2be5bd87ba6ea5\n", "2.0.0"),
    ("", None), ("bash: containerd: command not found", None),
])
def test_containerd_version_parsing(text, version):
    assert precheck.parse_containerd_version(text) == version


def test_kubelet_root_dir_from_its_flag_files():
    kubeadm = 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock ' \
              '--root-dir=/data/kubelet --pod-infra-container-image=registry.k8s.io/pause:3.9"\n'
    assert precheck.parse_kubelet_root_dir(None, kubeadm) == "/data/kubelet"
    assert precheck.parse_kubelet_root_dir('KUBELET_EXTRA_ARGS="--root-dir /srv/kubelet"') == "/srv/kubelet"
    assert precheck.parse_kubelet_root_dir("KUBELET_EXTRA_ARGS=", None) is None


def test_swaps_and_hugepages_from_real_proc_files():
    assert precheck.parse_swaps(host_fixture("proc-swaps_none_debian12.txt")) == []
    swaps = "Filename\tType\tSize\tUsed\tPriority\n/swap.img                               file\t\t4194300\t\t0\t\t-2\n"
    assert precheck.parse_swaps(swaps) == [{"device": "/swap.img", "size_kib": 4194300}]
    assert precheck.parse_meminfo_hugepages(host_fixture("proc-meminfo_debian12-vm.txt")) == {
        "total": 0, "free": 0, "size_kib": 2048}
    assert precheck.parse_meminfo_hugepages("") == {"total": None, "free": None, "size_kib": None}


def test_newest_kernel_sorts_releases_numerically():
    assert precheck.newest_kernel(["6.8.0-45-generic", "6.8.0-100-generic", "6.8.0-49-generic"]) == "6.8.0-100-generic"
    assert precheck.newest_kernel(["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64"]) == \
        "5.14.0-503.11.1.el9_5.x86_64"
    assert precheck.newest_kernel([]) is None
