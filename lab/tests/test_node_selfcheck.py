"""The post-reboot self-check (role node_selfcheck) on a node twin: seed case 7's four causes of GPUs gone after a
reboot, each reproduced and ending in a verdict on the node (and a repair where one is safe).

One fresh 1-node lab: blacklist nouveau, install the runfile driver with DKMS (DKMS signs the module with its own
key), reboot, install the role. Then, one reboot each: a kernel DKMS never built for (the build for the running
release removed, as after a kernel update whose postinst hook did not run) -> ``dkms autoinstall`` at boot and the
GPUs come back; the module built but not loaded (``blacklist nvidia``: udev does not load it) -> ``modprobe
nvidia``; Secure Boot on with the DKMS key not enrolled (fault ``secure-boot-no-key``) -> the verdict says enroll,
nothing is tried; a MIG layout made before the reboot and lost by it -> the verdict names it. The verdict is read
from the state file of that boot, and from the node's ``gpuops.nvidia/selfcheck`` annotation in the API twin (read
with the lab's kubeconfig), which the self-check PATCHes with the kubelet's credentials (kubelet.conf and the
``system:node:NAME`` client certificate the lab lays down at ``up``); that identity may not modify another node.
"""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import start_lab, stop_lab
from gpulab.testkit.modules import read_node
from roles_on_twin import recap, run_role

NODE = "gpu-node-01"
DRIVER = "615.71.09"
RUNFILE = "/root/NVIDIA-Linux-x86_64-%s.run" % DRIVER
STATE_FILE = "/var/lib/gpuops/selfcheck.json"
ANNOTATION = "gpuops.nvidia/selfcheck"
OTHER_NODE = "gpu-node-77"   # a Node object the lab's admin creates for the node identity to try
BOOTS = ("healthy", "new_kernel", "not_loaded", "not_enrolled", "sb_cleared", "mig_lost")


def patch_as_kubelet(lab, node_name: str) -> subprocess.CompletedProcess:
    """From inside the node, PATCH Node ``node_name``'s annotation as the node's kubelet (kubelet.conf's server, the
    cluster CA and the kubelet's client certificate): the HTTP status on the first line, then the body."""
    body = json.dumps({"metadata": {"annotations": {ANNOTATION: "ok"}}})
    return lab.ssh(NODE, "server=$(sed -n 's/^ *server: //p' /etc/kubernetes/kubelet.conf); "
                         "curl -sS -o /tmp/gpulab-test-patch.json -w '%%{http_code}' --max-time 10 "
                         "--cacert /etc/kubernetes/pki/ca.crt --cert /var/lib/kubelet/pki/kubelet-client-current.pem "
                         "-X PATCH -H 'Content-Type: application/merge-patch+json' -d '%s' \"$server/api/v1/nodes/%s\"; "
                         "echo; cat /tmp/gpulab-test-patch.json; rm -f /tmp/gpulab-test-patch.json"
                   % (body, node_name), check=False)


pytestmark = pytest.mark.skipif(not os.path.isdir("/usr/src") or not any(
    name.startswith("linux-headers-") for name in os.listdir("/usr/src")), reason="needs linux-headers-amd64")


def verdict_of_this_boot(lab, timeout_s=240) -> dict:
    """The self-check's state file once it was written in the node's current boot."""
    boot_id = lab.ssh(NODE, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = lab.ssh(NODE, "cat %s" % STATE_FILE, check=False)
        if done.returncode == 0:
            result = json.loads(done.stdout)
            if result.get("boot_id") == boot_id:
                return result
        time.sleep(0.5)
    log = lab.ssh(NODE, "cat /run/gpulab-systemd/gpuops-selfcheck.service.log "
                        "/run/gpulab-systemd/boot-sequence.log", check=False)
    raise AssertionError("no self-check verdict for boot %s after %ss: %s%s" % (boot_id, timeout_s, log.stdout,
                                                                                 log.stderr))


def observe(lab) -> dict:
    verdict = verdict_of_this_boot(lab)   # written after the annotation's PATCH returned
    return {"verdict": verdict,
            "annotations": read_node(lab, NODE)["metadata"].get("annotations") or {},
            "smi_list": lab.ssh(NODE, "nvidia-smi -L", check=False).stdout,
            "kubelet": lab.ssh(NODE, "systemctl is-active kubelet", check=False).stdout.strip(),
            "status": lab.node_status(NODE)}


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("selfcheck") / "state")
    workdir = str(tmp_path_factory.mktemp("selfcheck-play"))
    lab = start_lab(state_dir, "--nodes", "1", "--boot-delay", "0.3", "--mok-timeout", "1")
    steps = {}
    try:
        lab.ssh(NODE, "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > /etc/modprobe.d/blacklist-nouveau.conf")
        lab.reboot_from_inside(NODE)
        subprocess.run(["scp", "-q", "-F", os.path.join(state_dir, "ssh_config"),
                        os.path.join(state_dir, "runfiles", os.path.basename(RUNFILE)), "%s:%s" % (NODE, RUNFILE)],
                       check=True, timeout=60)
        lab.ssh(NODE, "sh %s --silent --dkms" % RUNFILE, timeout=600)
        lab.reboot_from_inside(NODE)
        steps["role_check"] = run_role(lab, "node_selfcheck", {}, workdir, check_mode=True)
        steps["after_check"] = lab.ssh(NODE, "ls /etc/systemd/system/gpuops-selfcheck.service", check=False)
        steps["role"] = run_role(lab, "node_selfcheck", {}, workdir)
        steps["role_again"] = run_role(lab, "node_selfcheck", {}, workdir)
        steps["unit"] = lab.ssh(NODE, "systemctl is-enabled gpuops-selfcheck; "
                                      "cat /etc/systemd/system/gpuops-selfcheck.service").stdout
        lab.reboot_from_inside(NODE)
        steps["healthy"] = observe(lab)

        # cause 1: a kernel DKMS never built the module for
        release = lab.ssh(NODE, "uname -r").stdout.strip()
        # dkms drops a module built for no kernel from its tree: add it back (its source stays in /usr/src), as on a
        # host whose old kernels are gone: "added", built for no kernel that runs
        lab.ssh(NODE, "dkms remove -m nvidia -v {v} -k {r} && dkms add -m nvidia -v {v}".format(v=DRIVER, r=release),
                timeout=120)
        steps["dkms_before"] = lab.ssh(NODE, "dkms status; modinfo -k %s nvidia" % release, check=False)
        lab.reboot_from_inside(NODE)
        steps["new_kernel"] = observe(lab)
        steps["dkms_after"] = lab.ssh(NODE, "dkms status").stdout

        # cause 2: built and installed, but nothing loads it at boot
        lab.ssh(NODE, "echo 'blacklist nvidia' > /etc/modprobe.d/gpulab-test-nvidia.conf")
        lab.reboot_from_inside(NODE)
        steps["not_loaded"] = observe(lab)
        lab.ssh(NODE, "rm /etc/modprobe.d/gpulab-test-nvidia.conf")

        # cause 3: Secure Boot on, the module's signing key (DKMS's) not enrolled
        lab.gpulab("fault", NODE, "secure-boot-no-key")
        lab.reboot_from_inside(NODE)
        steps["not_enrolled"] = observe(lab)
        steps["not_enrolled"]["dmesg"] = lab.ssh(NODE, "dmesg").stdout
        lab.gpulab("clear", NODE, "secure-boot-no-key")
        lab.reboot_from_inside(NODE)
        steps["sb_cleared"] = observe(lab)

        # cause 4: a MIG layout that the reboot lost
        steps["mig_setup"] = lab.ssh(NODE, "nvidia-smi -i 0 -mig 1 && nvidia-smi -i 0 -r", check=False)
        profile = lab.ssh(NODE, "nvidia-smi mig -i 0 -lgip", check=False).stdout
        steps["mig_profiles"] = profile
        steps["mig_create"] = lab.ssh(NODE, "nvidia-smi mig -i 0 -cgi 0 -C", check=False)
        layout = {"0": [line.split()[1] for line in lab.ssh(NODE, "nvidia-smi -L", check=False).stdout.splitlines()
                        if line.strip().startswith("MIG ")]}
        steps["mig_layout"] = layout
        steps["role_mig"] = run_role(lab, "node_selfcheck", {"node_selfcheck_mig_layout": layout,
                                                              "node_selfcheck_run_now": True}, workdir,
                                     result_var="node_selfcheck_result")
        steps["mig_kept"] = steps["role_mig"]["results"].get(NODE) or {}
        lab.reboot_from_inside(NODE)
        steps["mig_lost"] = observe(lab)
        steps["events"] = lab.events(node=NODE, kind="modprobe")

        # the node identity on another node, and on its own
        kubectl = ["kubectl", "--kubeconfig", os.path.join(state_dir, "kubeconfig")]
        subprocess.run(kubectl + ["create", "-f", "-"], input=json.dumps(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": OTHER_NODE}}), text=True, check=True,
            capture_output=True, timeout=60)
        steps["patch_other"] = patch_as_kubelet(lab, OTHER_NODE)
        steps["other_after"] = read_node(lab, OTHER_NODE)
        steps["patch_own"] = patch_as_kubelet(lab, NODE)
        subprocess.run(kubectl + ["delete", "node", OTHER_NODE], check=True, capture_output=True, timeout=60)
        yield steps
    finally:
        stop_lab(lab)


def test_role_in_check_mode_on_a_fresh_node_changes_nothing(flow):
    assert flow["role_check"]["rc"] == 0, flow["role_check"]["output"][-3000:]
    assert recap(flow["role_check"]["output"], NODE)["changed"] > 0
    assert flow["after_check"].returncode != 0


def test_role_installs_an_enabled_oneshot_unit_before_kubelet_and_is_idempotent(flow):
    assert flow["role"]["rc"] == 0, flow["role"]["output"][-3000:]
    assert flow["role_again"]["rc"] == 0 and recap(flow["role_again"]["output"], NODE)["changed"] == 0
    assert flow["unit"].startswith("enabled\n")
    assert "Type=oneshot" in flow["unit"] and "WantedBy=multi-user.target" in flow["unit"]
    assert "Before=kubelet.service k3s.service k3s-agent.service rke2-server.service rke2-agent.service" in flow["unit"]


def test_a_healthy_node_boots_with_verdict_ok_and_kubelet_started_after_it(flow):
    seen = flow["healthy"]
    assert (seen["verdict"]["status"], seen["verdict"]["code"], seen["verdict"]["attempt"]) == ("ok", None, None)
    assert seen["kubelet"] == "active"
    assert seen["verdict"]["annotation"]["written"] is True, seen["verdict"]["annotation"]


def test_a_kernel_without_the_dkms_build_is_rebuilt_at_boot_and_the_gpus_come_back(flow):
    assert "nvidia/%s: added" % DRIVER in flow["dkms_before"].stdout
    assert "not found" in flow["dkms_before"].stdout + flow["dkms_before"].stderr
    seen = flow["new_kernel"]
    verdict = seen["verdict"]
    assert (verdict["status"], verdict["code"], verdict["found"]) == (
        "repaired", "dkms_not_built_for_running_kernel", "dkms_not_built_for_running_kernel")
    assert verdict["attempt"]["argv"][:2] == ["dkms", "autoinstall"] and verdict["attempt"]["rc"] == 0
    assert ": installed" in flow["dkms_after"]
    assert seen["status"]["module_loaded"] is True and seen["smi_list"].startswith("GPU 0: ")
    assert seen["kubelet"] == "active"


def test_a_built_module_not_loaded_is_loaded_by_modprobe(flow):
    verdict = flow["not_loaded"]["verdict"]
    assert (verdict["status"], verdict["code"]) == ("repaired", "module_not_loaded")
    assert verdict["attempt"]["argv"] == ["modprobe", "nvidia"] and verdict["attempt"]["rc"] == 0
    assert flow["not_loaded"]["status"]["module_loaded"] is True
    assert any(event.get("ok") for event in flow["events"])


def test_a_module_signed_by_a_key_not_enrolled_gets_enroll_advice_and_no_repair(flow):
    seen = flow["not_enrolled"]
    verdict = seen["verdict"]
    assert "Loading of module with unavailable key is rejected" in seen["dmesg"]
    assert (verdict["status"], verdict["code"], verdict["attempt"]) == (
        "needs_operator", "secure_boot_signer_not_enrolled", None)
    assert "enroll the key" in verdict["advice"]
    assert seen["status"]["module_loaded"] is False


def test_once_the_key_is_trusted_again_the_next_boot_is_ok(flow):
    verdict = flow["sb_cleared"]["verdict"]
    assert (verdict["status"], verdict["code"]) == ("ok", None), verdict


def test_a_mig_layout_lost_in_the_reboot_is_named(flow):
    assert flow["role_mig"]["rc"] == 0, flow["role_mig"]["output"][-3000:]
    assert flow["mig_layout"]["0"], (flow["mig_setup"], flow["mig_profiles"], flow["mig_create"])
    assert flow["mig_kept"]["status"] == "ok"
    verdict = flow["mig_lost"]["verdict"]
    assert (verdict["status"], verdict["code"], verdict["attempt"]) == ("needs_operator", "mig_layout_lost", None)
    assert "GPU 0 has none" in verdict["advice"]


@pytest.mark.parametrize("boot", BOOTS)
def test_the_node_annotation_carries_the_verdict_of_each_boot(flow, boot):
    seen = flow[boot]
    verdict = seen["verdict"]
    assert verdict["annotation"]["written"] is True, verdict["annotation"]
    assert (verdict["annotation"]["node"], verdict["annotation"]["http_status"]) == (NODE, 200)
    assert verdict["annotation"]["kubeconfig"] == "/etc/kubernetes/kubelet.conf"
    # what the API twin holds (read with the lab's admin kubeconfig) is this boot's verdict
    expected = verdict["status"] if not verdict["code"] else "%s: %s" % (verdict["status"], verdict["code"])
    assert seen["annotations"][ANNOTATION].split(" (")[0] == expected, (seen["annotations"], verdict)
    assert seen["annotations"][ANNOTATION + "-at"] == verdict["checked_at"]
    if verdict["attempt"]:
        assert verdict["attempt"]["action"] in seen["annotations"][ANNOTATION]


def test_the_node_identity_may_not_patch_another_node(flow):
    status, _, body = flow["patch_other"].stdout.partition("\n")
    assert status == "403", flow["patch_other"]
    assert json.loads(body)["message"] == 'nodes "%s" is forbidden: node "%s" is not allowed to modify node "%s"' % (
        OTHER_NODE, NODE, OTHER_NODE)
    assert ANNOTATION not in (flow["other_after"]["metadata"].get("annotations") or {})
    assert flow["patch_own"].stdout.partition("\n")[0] == "200", flow["patch_own"]
