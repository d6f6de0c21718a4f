# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The post-reboot self-check's verdict on case 7's four causes, from real-world outputs (tests/unit/fixtures/kernel,
provenance in its PROVENANCE.md)."""

from __future__ import annotations

import os

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import selfcheck as sc

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "kernel")

# dkms-status_nvidia_samples.txt: nvidia/535.86.05 installed for this kernel (morrownr/rtl8852bu#7)
OLD_KERNEL = "6.5.0-060500rc5-generic"
NEW_KERNEL = "6.5.0-060500rc7-generic"


def fixture_text(name):
    with open(os.path.join(FIXTURES, name)) as stream:
        return stream.read()


def outputs(name):
    return "\n".join(line for line in fixture_text(name).splitlines() if not line.startswith("#"))


LSMOD = fixture_text("lsmod-grep-nvidia_tesla-t4_debian12-gce.txt")
MODINFO_DKMS = fixture_text("modinfo-nvidia_open_590.44.01_ubuntu-6.8-dkms_TRUNCATED.txt")
# a MOK-signed module (the only real signed modinfo: nvidia-uvm of the same DKMS build, signed like nvidia)
MODINFO_SIGNED = fixture_text("modinfo-nvidia-uvm_open_535.129.03_signed-mok_TRUNCATED.txt")
ENROLLED_CANONICAL = fixture_text("mokutil-list-enrolled_ubuntu-canonical-ca_CONSTRUCTED.txt")
DKMS_STATUS = "nvidia/535.86.05, %s, x86_64: installed\nrtl8852bu/1.19.3, %s, x86_64: installed\n" % (
    OLD_KERNEL, OLD_KERNEL)  # first two lines of dkms-status_nvidia_samples.txt
DKMS_SAMPLES = outputs("dkms-status_nvidia_samples.txt")
MIG_LISTING = fixture_text("utkuozdemir_h100-80gb-mig_590.48.01_nvidia-smi-L.txt")
MODINFO_NOT_FOUND = "modinfo: ERROR: Module nvidia not found.\n"


def test_dkms_status_samples_are_what_the_fixture_says():
    kernels = {entry["kernel"] for entry in sc.node_facts(OLD_KERNEL, "", "", dkms_text=DKMS_SAMPLES)["dkms"]}
    assert OLD_KERNEL in kernels and "5.11.0-36-generic" in kernels


def test_a_new_kernel_without_the_dkms_build_is_repaired_by_dkms_autoinstall_then_modprobe():
    facts = sc.node_facts(NEW_KERNEL, "", MODINFO_NOT_FOUND, sb_state_text="SecureBoot disabled\n",
                          dkms_text=DKMS_STATUS)
    result = sc.decide(facts)
    assert result["status"] == "repairable"
    assert result["code"] == "dkms_not_built_for_running_kernel"
    assert result["repair"] == {"action": "dkms_autoinstall", "argv": ["dkms", "autoinstall", "-k", NEW_KERNEL],
                                "then": ["modprobe", "nvidia"]}
    assert {"name": "dkms_built_for_running_kernel", "ok": False} == {
        k: v for k, v in result["checks"][1].items() if k != "detail"}


def test_a_module_built_but_not_loaded_is_repaired_by_modprobe():
    facts = sc.node_facts("6.8.0-90-generic", "", MODINFO_DKMS, sb_state_text="SecureBoot disabled\n",
                          dkms_text="nvidia/590.44.01, 6.8.0-90-generic, x86_64: installed\n")
    result = sc.decide(facts)
    assert (result["status"], result["code"]) == ("repairable", "module_not_loaded")
    assert result["repair"]["argv"] == ["modprobe", "nvidia"]


def test_a_module_signed_by_a_key_not_enrolled_says_enroll_and_tries_nothing():
    facts = sc.node_facts("5.15.0-76-generic", "", MODINFO_SIGNED, sb_state_text="SecureBoot enabled\n",
                          enrolled_text=ENROLLED_CANONICAL,
                          dkms_text="nvidia/535.129.03, 5.15.0-76-generic, x86_64: installed\n")
    result = sc.decide(facts)
    assert (result["status"], result["code"]) == ("needs_operator", "secure_boot_signer_not_enrolled")
    assert result["repair"] is None
    assert "enroll the key" in result["advice"] and "mokutil --import" in result["advice"]


def test_the_same_module_with_its_key_enrolled_is_loaded_by_modprobe():
    enrolled = ("[key 1]\nSHA1 Fingerprint: 01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:10:11:12:13:14\n"
                "        Subject: CN=localhost.localdomain Secure Boot Module Signature key\n")
    facts = sc.node_facts("5.15.0-76-generic", "", MODINFO_SIGNED, sb_state_text="SecureBoot enabled\n",
                          enrolled_text=enrolled)
    assert sc.decide(facts)["code"] == "module_not_loaded"


def test_an_unsigned_module_under_secure_boot_is_named_and_not_tried():
    facts = sc.node_facts("6.8.0-90-generic", "", MODINFO_DKMS, sb_state_text="SecureBoot enabled\n",
                          enrolled_text=ENROLLED_CANONICAL)
    result = sc.decide(facts)
    assert (result["status"], result["code"], result["repair"]) == (
        "needs_operator", "secure_boot_unsigned_module", None)


def test_shim_validation_disabled_does_not_judge_the_signature():
    facts = sc.node_facts("6.8.0-90-generic", "", MODINFO_DKMS,
                          sb_state_text="SecureBoot enabled\nSecureBoot validation is disabled in shim\n")
    assert sc.decide(facts)["code"] == "module_not_loaded"


def test_a_lost_mig_layout_is_named_with_what_each_gpu_has():
    wanted = {"0": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}
    assert sc.decide(sc.node_facts(OLD_KERNEL, LSMOD, MODINFO_DKMS, smi_list_text=MIG_LISTING,
                                   mig_layout_wanted=wanted))["status"] == "ok"
    no_mig = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
    result = sc.decide(sc.node_facts(OLD_KERNEL, LSMOD, MODINFO_DKMS, smi_list_text=no_mig,
                                     mig_layout_wanted=wanted))
    assert (result["status"], result["code"], result["repair"]) == ("needs_operator", "mig_layout_lost", None)
    assert "GPU 0 has none, wants 3g.40gb,2g.20gb,1g.10gb,1g.10gb" in result["advice"]


def test_parse_mig_listing_reads_the_profiles_per_gpu():
    assert sc.parse_mig_listing(MIG_LISTING) == {"0": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}


def test_a_loaded_driver_on_its_kernel_is_ok():
    result = sc.decide(sc.node_facts(OLD_KERNEL, LSMOD, MODINFO_DKMS, dkms_text=DKMS_STATUS))
    assert (result["status"], result["code"], result["repair"]) == ("ok", None, None)
    assert all(check["ok"] for check in result["checks"])


def test_no_module_and_nothing_for_dkms_to_build_asks_for_a_driver_install():
    result = sc.decide(sc.node_facts(NEW_KERNEL, "", MODINFO_NOT_FOUND, dkms_text=""))
    assert (result["status"], result["code"], result["repair"]) == ("needs_operator", "module_not_loaded", None)


def test_summary_names_the_code_and_the_repair_tried():
    result = {"status": "ok", "code": "module_not_loaded", "attempt": {"action": "modprobe", "rc": 0}}
    assert sc.summary(result) == "ok: module_not_loaded (modprobe ok)"
    assert sc.summary({"status": "ok", "code": None}) == "ok"
