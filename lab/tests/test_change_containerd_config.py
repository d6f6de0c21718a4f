"""The change kind containerd_config over the twin: the change runbook (`gpuops.nvidia.change`) run with real
ansible-playbook over real SSH on three GPU nodes whose real containerd (Debian's 1.6) is restarted through the
nodes' systemctl, verified with its `config dump` and a GPU pod. A node whose containerd runs creates a pod's
sandbox only as that containerd would (`gpulab.containerdcri`): a default runtime whose binary the node lacks
leaves every new pod in ContainerCreating, which is how a broken drop-in fails the canary.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import collections_path, start_lab, stop_lab
from gpulab import containerdcri

NODES = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
MAIN = "/etc/containerd/config.toml"
RECORD = "gpuops.nvidia/change-containerd-config"
RUNTIME = "/usr/bin/nvidia-container-runtime"
CRI = "io.containerd.grpc.v1.cri"


# --- the twin's judgement of a sandbox, on containerd config dump's own layout ----------------------------------
def _dump(default=None, runtimes=None, plugin=CRI):
    table = {"runtimes": runtimes or {"runc": {"runtime_type": "io.containerd.runc.v2", "options": {}}}}
    if default:
        table["default_runtime_name"] = default
    return {"version": 2, "plugins": {plugin: {"containerd": table}}}


def test_a_sandbox_is_refused_only_for_a_missing_runtime_or_its_missing_binary():
    present = {"runc", "/usr/bin/nvidia-container-runtime"}.__contains__
    nvidia = {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": RUNTIME}}
    runc = {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
    assert containerdcri.sandbox_error(_dump(default="runc"), None, present) is None
    assert containerdcri.sandbox_error(_dump(), None, present) is None, "no default_runtime_name: runc"
    with_nvidia = _dump(default="nvidia", runtimes={"runc": runc, "nvidia": nvidia})
    assert containerdcri.sandbox_error(with_nvidia, None, present) is None
    assert containerdcri.sandbox_error(with_nvidia, None, "runc".__eq__).endswith(
        'exec: "%s": stat %s: no such file or directory: unknown' % (RUNTIME, RUNTIME))
    assert containerdcri.sandbox_error(_dump(default="runc"), "nvidia", present) == (
        'rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "nvidia" is configured')
    # containerd 2.x dumps version 3, the CRI runtime under its new plugin name
    v3 = _dump(default="nvidia", runtimes={"nvidia": nvidia}, plugin="io.containerd.cri.v1.runtime")
    assert containerdcri.sandbox_error(v3, None, "runc".__eq__) is not None
    assert containerdcri.judged("containerd.service\nkubelet.service\n")
    assert not containerdcri.judged("kubelet.service\n")
