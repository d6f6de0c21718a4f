# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import os
import re

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia import gpu_support as gpu

FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "nvidia_smi"))


def fixture_device_ids():
    """(product name, PCI device id) of every GPU in the real nvidia-smi -q -x captures."""
    found = []
    for name in sorted(os.listdir(FIXTURES)):
        if name.endswith(".xml"):
            with open(os.path.join(FIXTURES, name)) as stream:
                text = stream.read()
            for product, device in re.findall(r"<product_name>([^<]*)</product_name>.*?<pci_device_id>([0-9A-F]{4})",
                                              text, re.S):
                found.append((product, device))
    return sorted(set(found))


EXPECTED_GENERATION = {"NVIDIA A100-SXM4-40GB": "ampere", "NVIDIA A100-SXM4-80GB": "ampere",
                       "NVIDIA GeForce GT 1030": "pascal", "NVIDIA GeForce RTX 3080": "ampere",
                       "NVIDIA RTX A5000": "ampere", "Tesla T4": "turing"}


def test_generations_of_the_gpus_in_real_captures():
    seen = {product: gpu.generation_of("0x" + device) for product, device in fixture_device_ids()
            if product in EXPECTED_GENERATION}
    assert seen == EXPECTED_GENERATION


@pytest.mark.parametrize("device_id, generation", [
    ("0x2330", "hopper"), ("0x2335", "hopper"), ("0x2342", "hopper"),   # H100 SXM, H200, GH200
    ("0x26b9", "ada"), ("0x27b8", "ada"),                                # L40S, L4
    ("0x2901", "blackwell"), ("0x2b85", "blackwell"),                    # B200, RTX 5090
    ("0x1db1", "volta"), ("0x1db6", "volta"),                            # V100 SXM2 16/32GB
    ("0x15f8", "pascal"), ("0x1b38", "pascal"),                          # P100, P40
    ("0x13f2", "maxwell"), ("0x102d", "kepler"), ("0x2182", "turing"),   # M60, K80, GTX 1660 Ti
    ("0x0de1", "pre-kepler"), ("garbage", None), (None, None), (0x20b2, "ampere"),
])
def test_generation_by_pci_device_id(device_id, generation):
    assert gpu.generation_of(device_id) == generation


@pytest.mark.parametrize("requested, generations, version, module_type, reason_part", [
    ("auto", ["hopper"] * 8, "580.95.05", "open", "recommendation"),
    ("auto", ["blackwell"], "580.95.05", "open", "need the open"),
    ("auto", ["volta"], "580.95.05", "proprietary", "need the proprietary"),
    ("auto", ["ampere"], "550.54.15", "proprietary", "branch 550 predates"),
    ("proprietary", ["hopper"], "580.95.05", "proprietary", "requested"),
])
def test_module_type_resolution(requested, generations, version, module_type, reason_part):
    decision = gpu.resolve_module_type(requested, generations, version)
    assert decision["module_type"] == module_type and decision["error"] is None
    assert reason_part in decision["reason"]


def test_a_flavour_the_gpus_cannot_run_is_an_error_that_names_them():
    decision = gpu.resolve_module_type("open", ["volta"], "580.95.05")
    assert decision["module_type"] is None
    assert "open kernel modules do not support this node's GPUs (volta): use proprietary" in decision["error"]
    mixed = gpu.resolve_module_type("auto", ["volta", "blackwell"], "580.95.05")
    assert mixed["module_type"] is None and "volta, blackwell" in mixed["error"]


@pytest.mark.parametrize("version, generation, problem", [
    ("580.95.05", "volta", None),
    ("590.44.01", "volta", "branch 580 is the last with Volta support"),
    ("470.256.02", "kepler", None),
    ("535.274.02", "kepler", "branch 470 is the last with Kepler support"),
    ("565.57.01", "blackwell", "Blackwell GPUs need driver branch 570 or newer"),
    ("580.95.05", "hopper", None),
])
def test_driver_branch_windows(version, generation, problem):
    assert gpu.driver_supports_generation(version, generation) == problem


@pytest.mark.parametrize("cuda, minimum, how", [
    ("12.2", "535.54.03", "toolkit table"), ("13.0", "580.65.06", "toolkit table"),
    ("13.1", "580.65.06", "minor version compatibility of CUDA 13"), ("12.8.1", "570.26", "toolkit table"),
    ("14.0", None, "unknown CUDA major version 14"), ("twelve", None, "malformed"),
])
def test_driver_a_cuda_version_needs(cuda, minimum, how):
    assert gpu.cuda_min_driver(cuda) == (minimum, how)


def test_cuda_13_drops_volta_and_older_but_keeps_turing():
    assert gpu.cuda_supports_generation("13.0", "volta") == "CUDA 13 supports Turing and newer GPUs, not Volta"
    assert gpu.cuda_supports_generation("13.0", "pascal") is not None
    assert gpu.cuda_supports_generation("13.0", "turing") is None
    assert gpu.cuda_supports_generation("12.8", "volta") is None
    assert gpu.cuda_supports_generation("12.0", "kepler") == "CUDA 12 supports Maxwell and newer GPUs, not Kepler"


@pytest.mark.parametrize("text, parsed", [
    ("580.95.05", (580, 95, 5)), ("570.26", (570, 26, 0)), ("1000.1.1", (1000, 1, 1)),
    ("580.95", (580, 95, 0)), ("580", None), ("v580.95.05", None), ("580.95.05-1", None), ("", None), (None, None),
])
def test_driver_version_syntax(text, parsed):
    assert gpu.parse_driver_version(text) == parsed


def test_dotted_version_comparison_is_numeric():
    assert gpu.version_at_least("580.65.06", "575.51.03")
    assert gpu.version_at_least("1.10.0", "1.7.0")
    assert not gpu.version_at_least("570.26", "570.124.06")
