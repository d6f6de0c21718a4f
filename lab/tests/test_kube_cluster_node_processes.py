"""Pods on real node twins run their command inside the node: its namespaces (boot id, hostname), its programs
and its process table; `kubectl logs` shows the output; deleting the pod ends the process in the node.
Uses the session lab (root, namespaces, sshd) and real kubectl against the twin's API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="needs kubectl on PATH")


def kubectl(lab, *args, check=True):
    result = subprocess.run([KUBECTL, "--kubeconfig", os.path.join(lab.state_dir, "kubeconfig")] + list(args),
                            capture_output=True, text=True, timeout=90)
    if check and result.returncode != 0:
        raise AssertionError("kubectl %s failed:\n%s%s" % (" ".join(args), result.stdout, result.stderr))
    return result


def run_on(lab, node, name, *command, restart="Never"):
    overrides = {"apiVersion": "v1", "spec": {"nodeName": node}}
    kubectl(lab, "run", name, "--image=busybox", "--restart=" + restart, "--overrides=" + json.dumps(overrides),
            "--", *command)


def test_a_pod_command_runs_in_its_node_and_its_output_is_the_log(lab):
    node = lab.node_names[1]
    boot_id = lab.ssh(node, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    run_on(lab, node, "whoami-node", "sh", "-c", "hostname; cat /proc/sys/kernel/random/boot_id")
    kubectl(lab, "wait", "pod/whoami-node", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=60s")
    assert kubectl(lab, "logs", "whoami-node").stdout.split() == [node, boot_id]
    kubectl(lab, "delete", "pod", "whoami-node")


def test_deleting_a_pod_ends_its_process_inside_the_node(lab):
    node = lab.node_names[2]
    marker = "%d" % (7000 + time.time() % 1000)
    run_on(lab, node, "sleeper", "sleep", marker, restart="Always")
    kubectl(lab, "wait", "pod/sleeper", "--for=condition=Ready", "--timeout=60s")
    deadline = time.time() + 20
    while lab.ssh(node, "pgrep -f 'sleep %s'" % marker, check=False).returncode != 0:
        assert time.time() < deadline, "the pod's process never showed up in the node"
        time.sleep(0.2)
    kubectl(lab, "delete", "pod", "sleeper", "--grace-period=5", "--timeout=60s")
    assert lab.ssh(node, "pgrep -f 'sleep %s'" % marker, check=False).returncode == 1


def test_a_command_the_node_does_not_have_keeps_running_until_deleted(lab):
    node = lab.node_names[0]
    run_on(lab, node, "absent", "/opt/vendor/bin/serve", restart="Always")
    kubectl(lab, "wait", "pod/absent", "--for=condition=Ready", "--timeout=60s")
    time.sleep(1)
    status = json.loads(kubectl(lab, "get", "pod", "absent", "-o", "json").stdout)["status"]["containerStatuses"][0]
    assert "running" in status["state"] and status["restartCount"] == 0
    kubectl(lab, "delete", "pod", "absent", "--timeout=60s")
