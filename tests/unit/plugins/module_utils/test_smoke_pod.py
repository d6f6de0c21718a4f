# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.smoke_pod import listed_gpus, pod_manifest

PARAMS = dict(node="gpu-node-01", namespace="default", image="nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04",
              command=["nvidia-smi", "-L"], resource="nvidia.com/gpu", runtime_class=None)


def test_the_pod_is_pinned_to_the_node_asks_for_its_gpus_and_tolerates_its_taints():
    pod = pod_manifest("gpuops-smoke-1a2b3c4d", PARAMS, 8)
    assert pod["spec"]["nodeName"] == "gpu-node-01" and pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert pod["spec"]["tolerations"] == [{"operator": "Exists"}]
    assert "runtimeClassName" not in pod["spec"]
    assert pod_manifest("p", dict(PARAMS, runtime_class="nvidia"), 1)["spec"]["runtimeClassName"] == "nvidia"


def test_only_the_nvidia_smi_gpu_lines_of_the_log_count():
    log = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0f1e)\n  MIG 1g.10gb Device 0: (UUID: MIG-1)\n"
           "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2d3c)\nNo devices were found\n")
    assert listed_gpus(log) == ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0f1e)",
                                "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2d3c)"]
    assert listed_gpus("") == []
