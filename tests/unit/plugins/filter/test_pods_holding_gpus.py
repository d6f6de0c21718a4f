# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the pods_holding_gpus filter (the guard of the case-3 version-skew reboot)."""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.filter.pods_holding_gpus import pods_holding_gpus


def pod(name, phase="Running", limits=None, requests=None):
    return {"metadata": {"namespace": "ml", "name": name}, "status": {"phase": phase},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}]}}


def test_live_pods_with_an_nvidia_limit_or_request_hold_gpus():
    pods = [pod("train", limits={"nvidia.com/gpu": "2"}), pod("mig", requests={"nvidia.com/mig-1g.10gb": 1}),
            pod("web", limits={"cpu": "1"}), pod("done", phase="Succeeded", limits={"nvidia.com/gpu": 1}),
            pod("zero", limits={"nvidia.com/gpu": "0"}), {"metadata": {"name": "bare"}}]
    assert pods_holding_gpus(pods) == ["ml/train", "ml/mig"]
    assert pods_holding_gpus(None) == []
