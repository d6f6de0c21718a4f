"""Seed case 7's two causes the post-reboot self-check only names, repaired through `diagnose` with
`gpuops_remediate: true` (tasks/repair_selfcheck.yml) on a node twin: real ansible-playbook, real SSH, the API twin.

One 1-node lab (the device plugin's mixed MIG strategy): the runfile driver installed with DKMS (DKMS signs the
module with its own key, /var/lib/dkms/mok.pub), the self-check role installed. Then:

- Secure Boot on with DKMS's key not enrolled (fault `secure-boot-no-key`), reboot: the self-check says
  `needs_operator: secure_boot_signer_not_enrolled`. `diagnose --check` stages nothing; `diagnose` stages the key
  with `mokutil --import` and the one-time password (never in the run's output or artifacts) and says the next boot
  needs the console. `gpulab mok-confirm` (someone at the console), reboot: MokManager enrolls the key, the module
  loads, the self-check's verdict is ok and the GPUs are back.
- A MIG layout on GPU 0 that the self-check was told to keep, lost in a reboot (`mig_layout_lost`): `diagnose
  --check` re-creates nothing; `diagnose` re-creates it with `nvidia-smi mig -cgi ... -C`, restarts the device
  plugin and the layout's `nvidia.com/mig-*` resources are allocatable again.
"""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from diagnose_helpers import run_diagnose
from gpulab.testkit.modules import read_node, run_module, wait_allocatable
from roles_on_twin import run_role

ansible_runner = pytest.importorskip("ansible_runner")

pytestmark = [
    pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)"),
    pytest.mark.skipif(not os.path.isdir("/usr/src") or not any(
        name.startswith("linux-headers-") for name in os.listdir("/usr/src")), reason="needs linux-headers-amd64"),
]

NODE = "gpu-node-01"
DRIVER = "615.71.09"
RUNFILE = "/root/NVIDIA-Linux-x86_64-%s.run" % DRIVER
STATE_FILE = "/var/lib/gpuops/selfcheck.json"
REPORT_TASK = "Case 7: what the self-check found and what is repaired here"
PASSWORD = "gpulab-mok-0451"   # the one-time MOK password the test gives diagnose; must never be logged
LAYOUT = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
# what the mixed strategy advertises for LAYOUT on GPU 0 of an 8-GPU node
RESOURCES = {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-1g.10gb": "2",
             "nvidia.com/gpu": "7"}


def verdict_of_this_boot(lab, timeout_s=240) -> dict:
    boot_id = lab.ssh(NODE, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = lab.ssh(NODE, "cat %s" % STATE_FILE, check=False)
        if done.returncode == 0:
            result = json.loads(done.stdout)
            if result.get("boot_id") == boot_id:
                return result
        time.sleep(0.5)
    raise AssertionError("no self-check verdict for boot %s after %ss" % (boot_id, timeout_s))


def mig_listing(lab) -> list:
    listing = lab.ssh(NODE, "nvidia-smi -L", check=False).stdout
    return sorted(line.split()[1] for line in listing.splitlines() if line.strip().startswith("MIG"))


def allocatable(lab) -> dict:
    found = read_node(lab, NODE)["status"].get("allocatable") or {}
    return {name: value for name, value in found.items() if name in RESOURCES and value not in ("0", 0)}


def wait_for(predicate, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(1)
    return False


def artifacts_text(path) -> str:
    """Everything ansible-runner kept of a run (stdout, job events, the command line), as one text."""
    chunks = []
    for root, _dirs, files in os.walk(str(path)):
        for name in files:
            if name in ("extravars", "passwords"):   # what the test handed the runner, not what the run logged
                continue
            with open(os.path.join(root, name), errors="replace") as stream:
                chunks.append(stream.read())
    return "\n".join(chunks)


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    base = tmp_path_factory.mktemp("repair-selfcheck")
    lab = start_lab(str(base / "state"), "--nodes", "1", "--boot-delay", "0.3", "--mok-timeout", "5",
                    "--mig-strategy", "mixed")
    steps = {}
    try:
        lab.ssh(NODE, "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > /etc/modprobe.d/blacklist-nouveau.conf")
        lab.reboot_from_inside(NODE)
        subprocess.run(["scp", "-q", "-F", os.path.join(lab.state_dir, "ssh_config"),
                        os.path.join(lab.state_dir, "runfiles", os.path.basename(RUNFILE)), "%s:%s" % (NODE, RUNFILE)],
                       check=True, timeout=60)
        lab.ssh(NODE, "sh %s --silent --dkms" % RUNFILE, timeout=600)
        lab.reboot_from_inside(NODE)
        role = run_role(lab, "node_selfcheck", {}, str(base / "role"))
        assert role["rc"] == 0, role["output"][-3000:]

        # (a) Secure Boot on, DKMS's signing key not enrolled
        lab.gpulab("fault", NODE, "secure-boot-no-key")
        lab.reboot_from_inside(NODE)
        steps["sb_verdict"] = verdict_of_this_boot(lab)
        steps["sb_dry"] = run_diagnose(lab, base / "sb-dry", check_mode=True, gpuops_remediate=True,
                                       gpuops_mok_password=PASSWORD)
        steps["sb_dry_staged"] = lab.ssh(NODE, "mokutil --list-new", check=False)
        seen = {}
        steps["sb_fix"] = run_diagnose(lab, base / "sb-fix", tasks_seen=seen, gpuops_remediate=True,
                                       gpuops_mok_password=PASSWORD)
        steps["sb_fix_tasks"] = seen.get(NODE, {})
        steps["sb_fix_artifacts"] = artifacts_text(base / "sb-fix")
        steps["sb_staged"] = lab.ssh(NODE, "mokutil --list-new", check=False)
        steps["sb_cert_fingerprint"] = lab.ssh(NODE, "openssl x509 -inform DER -in /var/lib/dkms/mok.pub -noout "
                                                     "-fingerprint -sha1").stdout
        # someone at the console confirms the key in MokManager, at the next boot
        since = time.time()
        lab.gpulab("mok-confirm", NODE)
        lab.reboot_from_inside(NODE)
        steps["sb_after"] = verdict_of_this_boot(lab)
        steps["sb_enrolled_events"] = lab.events(node=NODE, kind="mok-enrolled", since=since)
        steps["sb_smi"] = lab.ssh(NODE, "nvidia-smi -L", check=False).stdout
        steps["sb_allocatable"] = wait_allocatable(lab, NODE, "8", timeout_s=120)
        lab.gpulab("clear", NODE, "secure-boot-no-key")

        # (b) a MIG layout on GPU 0 the self-check keeps, lost in the reboot
        lab.ssh(NODE, "nvidia-smi -i 0 -mig 1 && nvidia-smi -i 0 -r && nvidia-smi mig -i 0 -cgi %s -C"
                % ",".join(LAYOUT), timeout=60)
        ok, result = run_module(lab, "device_plugin_restart", {"nodes": [NODE]})
        assert ok, result
        steps["mig_before"] = wait_for(lambda: allocatable(lab) == RESOURCES)
        role = run_role(lab, "node_selfcheck", {"node_selfcheck_mig_layout": {"0": LAYOUT}}, str(base / "role"))
        assert role["rc"] == 0, role["output"][-3000:]
        lab.reboot_from_inside(NODE)
        steps["mig_verdict"] = verdict_of_this_boot(lab)
        steps["mig_lost_listing"] = mig_listing(lab)
        since = time.time()
        steps["mig_dry"] = run_diagnose(lab, base / "mig-dry", check_mode=True, gpuops_remediate=True)
        steps["mig_dry_listing"] = mig_listing(lab)
        steps["mig_dry_boots"] = lab.events(node=NODE, kind="up", since=since)
        steps["mig_fix"] = run_diagnose(lab, base / "mig-fix", gpuops_remediate=True)
        steps["mig_fix_listing"] = mig_listing(lab)
        steps["mig_fix_allocatable"] = allocatable(lab)
        steps["mig_fix_boots"] = lab.events(node=NODE, kind="up", since=since)
        yield steps
    finally:
        stop_lab(lab)


def test_an_unenrolled_signing_key_is_named_by_the_selfcheck(flow):
    verdict = flow["sb_verdict"]
    assert (verdict["status"], verdict["code"]) == ("needs_operator", "secure_boot_signer_not_enrolled"), verdict


def test_the_dry_run_stages_no_key(flow):
    rc, _shown, changed, failed = flow["sb_dry"]
    assert rc == 0 and not failed
    # in check mode a changed task is one that would change: the staging is skipped, nothing is staged
    assert not any("mokutil --import" in task for task in changed.get(NODE, [])), changed
    assert "SHA1 Fingerprint" not in flow["sb_dry_staged"].stdout, flow["sb_dry_staged"]


def test_diagnose_stages_the_key_without_logging_the_password_and_says_the_console_must_confirm(flow):
    rc, _shown, changed, failed = flow["sb_fix"]
    assert rc == 0 and not failed, flow["sb_fix_tasks"]
    assert any("mokutil --import" in task for task in changed.get(NODE, [])), (
        changed, flow["sb_fix_tasks"].get(REPORT_TASK), flow["sb_fix_tasks"].get("Show the node summary, the failing "
                                                                                  "layer, the cases and their fix"))
    fingerprint = flow["sb_cert_fingerprint"].split("=")[-1].strip().lower()
    assert fingerprint and fingerprint in flow["sb_staged"].stdout.lower(), (fingerprint, flow["sb_staged"])
    said = flow["sb_fix_tasks"]["The key waits for the console's confirmation at the next boot"]["msg"]
    assert "MokManager" in said and "gpulab mok-confirm %s" % NODE in said, said
    assert PASSWORD not in flow["sb_fix_artifacts"]


def test_after_the_confirmed_reboot_the_selfcheck_is_ok_and_the_gpus_are_back(flow):
    assert len(flow["sb_enrolled_events"]) == 1, flow["sb_enrolled_events"]
    verdict = flow["sb_after"]
    assert (verdict["status"], verdict["code"]) == ("ok", None), verdict
    assert flow["sb_smi"].startswith("GPU 0: "), flow["sb_smi"]
    assert flow["sb_allocatable"] == "8"


def test_a_lost_mig_layout_is_named_and_the_dry_run_recreates_nothing(flow):
    assert flow["mig_before"]
    verdict = flow["mig_verdict"]
    assert (verdict["status"], verdict["code"]) == ("needs_operator", "mig_layout_lost"), verdict
    assert flow["mig_lost_listing"] == []
    rc, _shown, _changed, failed = flow["mig_dry"]
    assert rc == 0 and not failed
    assert flow["mig_dry_listing"] == []
    assert flow["mig_dry_boots"] == []


def test_diagnose_recreates_the_layout_and_its_mig_resources_come_back(flow):
    rc, _shown, changed, failed = flow["mig_fix"]
    assert rc == 0 and not failed
    assert any("Re-create the layout" in task for task in changed.get(NODE, [])), changed
    assert flow["mig_fix_listing"] == sorted(LAYOUT)
    assert flow["mig_fix_allocatable"] == RESOURCES, flow["mig_fix_allocatable"]
    assert flow["mig_fix_boots"] == []
