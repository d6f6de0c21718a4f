"""Hardware profiles of the node twin: which NVIDIA GPUs a node has and their live state (`hw.json`).

Model data are taken from real captures in `tests/unit/fixtures/nvidia_smi/` (device ids, memory totals, power
limits, VBIOS strings); PCI addresses are those of a real 8-GPU HGX baseboard.
"""
from __future__ import annotations

import copy
import hashlib
import uuid as uuidlib

HGX_PCI_ADDRESSES = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                     "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
PCIE_SERVER_ADDRESSES = ["0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0"]

# MIG GPU-instance profiles: name -> (profile id, slices, memory_total_mib of the MIG device)
A100_80GB_MIG_PROFILES = {
    "1g.10gb": (19, 1, 9728), "1g.20gb": (15, 1, 19968), "2g.20gb": (14, 2, 19968),
    "3g.40gb": (9, 3, 40192), "4g.40gb": (5, 4, 40192), "7g.80gb": (0, 7, 80896),
}
H100_80GB_MIG_PROFILES = {
    "1g.10gb": (19, 1, 9984), "1g.20gb": (15, 1, 20096), "2g.20gb": (14, 2, 20096),
    "3g.40gb": (9, 3, 40448), "4g.40gb": (5, 4, 40448), "7g.80gb": (0, 7, 80768),
}

MODELS = {
    "A100-SXM4-80GB": {
        "name": "NVIDIA A100-SXM4-80GB", "brand": "NVIDIA", "architecture": "Ampere",
        "device_id": "0x20b2", "subsystem_id": "0x147f10de", "vbios_version": "92.00.36.00.02",
        "memory_total_mib": 81920, "memory_reserved_mib": 590, "bar1_total_mib": 131072,
        "power_limit_w": 400.0, "idle_power_draw_w": 62.31, "idle_temperature_c": 31,
        "compute_cap": "8.0", "pcie_gen": 4, "mig_profiles": A100_80GB_MIG_PROFILES,
        "row_remapping": True, "gsp_firmware": True,
    },
    "H100-SXM-80GB": {
        "name": "NVIDIA H100 80GB HBM3", "brand": "NVIDIA", "architecture": "Hopper",
        "device_id": "0x2330", "subsystem_id": "0x16c110de", "vbios_version": "96.00.A5.00.01",
        "memory_total_mib": 81559, "memory_reserved_mib": 479, "bar1_total_mib": 131072,
        "power_limit_w": 700.0, "idle_power_draw_w": 71.15, "idle_temperature_c": 30,
        "compute_cap": "9.0", "pcie_gen": 5, "mig_profiles": H100_80GB_MIG_PROFILES,
        "row_remapping": True, "gsp_firmware": True,
    },
    "L40S": {
        "name": "NVIDIA L40S", "brand": "NVIDIA", "architecture": "Ada Lovelace",
        "device_id": "0x26b9", "subsystem_id": "0x185110de", "vbios_version": "95.02.66.00.02",
        "memory_total_mib": 46068, "memory_reserved_mib": 567, "bar1_total_mib": 65536,
        "power_limit_w": 350.0, "idle_power_draw_w": 35.87, "idle_temperature_c": 28,
        "compute_cap": "8.9", "pcie_gen": 4, "mig_profiles": {},
        "row_remapping": True, "gsp_firmware": True,
    },
}
# `gpulab up --profile` names
CLI_PROFILES = {"h100x8": "h100-sxm-80gb-x8", "a100x8": "a100-sxm4-80gb-x8", "l40sx4": "l40s-x4"}

# What the Kubernetes twin's API-only nodes and test GPUs are (NVML's name and memory total of an H100 SXM)
H100_NAME = MODELS["H100-SXM-80GB"]["name"]
H100_MEMORY_MIB = MODELS["H100-SXM-80GB"]["memory_total_mib"]

PROFILES = {
    "a100-sxm4-80gb-x8": {"model": "A100-SXM4-80GB", "gpu_count": 8, "pci_addresses": HGX_PCI_ADDRESSES,
                          "efi": True},
    "h100-sxm-80gb-x8": {"model": "H100-SXM-80GB", "gpu_count": 8, "pci_addresses": HGX_PCI_ADDRESSES,
                         "efi": True},
    "l40s-x4": {"model": "L40S", "gpu_count": 4, "pci_addresses": PCIE_SERVER_ADDRESSES, "efi": True},
    "a100-sxm4-80gb-x2-bios": {"model": "A100-SXM4-80GB", "gpu_count": 2, "pci_addresses": HGX_PCI_ADDRESSES,
                               "efi": False},
    "cpu-only": {"model": None, "gpu_count": 0, "pci_addresses": [], "efi": True},
}


def stable_uuid(kind: str, *parts: object) -> str:
    """A UUID string that depends only on its inputs, formatted as NVML prints them (`GPU-…`, `MIG-…`)."""
    digest = hashlib.sha256("/".join(str(part) for part in (kind,) + parts).encode()).digest()
    return "%s-%s" % (kind, uuidlib.UUID(bytes=digest[:16]))


def gpu_serial(node_name: str, index: int) -> str:
    digest = hashlib.sha256(("serial/%s/%d" % (node_name, index)).encode()).hexdigest()
    return "16%011d" % (int(digest[:12], 16) % 10 ** 11)


def new_gpu(node_name: str, model_key: str, index: int, pci_address: str) -> dict:
    model = MODELS[model_key]
    return {
        "index": index,
        "model": model_key,
        "name": model["name"],
        "uuid": stable_uuid("GPU", node_name, index),
        "serial": gpu_serial(node_name, index),
        "pci_address": pci_address,
        "device_id": model["device_id"],
        "on_bus": True,
        "memory_total_mib": model["memory_total_mib"],
        "memory_used_mib": 0,
        "persistence_mode": False,
        "compute_mode": "Default",
        "mig_capable": bool(model["mig_profiles"]),
        # NVML reports MIG mode N/A on GPUs without MIG
        "mig_mode_current": False if model["mig_profiles"] else None,
        "mig_mode_pending": False if model["mig_profiles"] else None,
        "mig_devices": [],
        "ecc_volatile_uncorrectable": 0,
        "ecc_aggregate_uncorrectable": 0,
        # Ampere and later data-centre GPUs remap rows instead of retiring pages: NVML reports N/A for pages
        "retired_pages_pending": None if model["row_remapping"] else False,
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "temperature_c": model["idle_temperature_c"] + index % 3,
        "power_draw_w": round(model["idle_power_draw_w"] + index * 1.37, 2),
        "power_limit_w": model["power_limit_w"],
        "processes": [],
        # model constants copied in so that nvidia-smi inside the node needs nothing but hw.json
        "brand": model["brand"],
        "architecture": model["architecture"],
        "subsystem_id": model["subsystem_id"],
        "vbios_version": model["vbios_version"],
        "memory_reserved_mib": model["memory_reserved_mib"],
        "bar1_total_mib": model["bar1_total_mib"],
        "compute_cap": model["compute_cap"],
        "pcie_gen": model["pcie_gen"],
        "mig_profiles": {name: list(spec) for name, spec in model["mig_profiles"].items()},
    }


def make_hw(node_name: str, profile_name: str) -> dict:
    """The initial `hw.json` of a node: its GPUs (all healthy, MIG off) and firmware type."""
    try:
        profile = PROFILES[profile_name]
    except KeyError:
        raise ValueError("unknown hardware profile %r; known: %s" % (profile_name, ", ".join(sorted(PROFILES))))
    gpus = [new_gpu(node_name, profile["model"], index, profile["pci_addresses"][index])
            for index in range(profile["gpu_count"])]
    return {"node": node_name, "profile": profile_name, "efi": profile["efi"], "gpus": gpus}


def mig_profile(gpu: dict, profile_name: str) -> tuple:
    """(profile id, slices, memory_total_mib) of a MIG profile on this GPU's model, ValueError if unknown."""
    profiles = gpu["mig_profiles"]
    if profile_name not in profiles:
        raise ValueError("MIG profile %s is not supported by %s" % (profile_name, gpu["name"]))
    return tuple(profiles[profile_name])


def make_mig_device(gpu: dict, node_name: str, index: int, profile_name: str, gpu_instance_id: int) -> dict:
    _profile_id, _slices, memory_total_mib = mig_profile(gpu, profile_name)
    return {
        "index": index,
        "gpu_instance_id": gpu_instance_id,
        "compute_instance_id": 0,
        "profile": profile_name,
        "memory_total_mib": memory_total_mib,
        "uuid": stable_uuid("MIG", node_name, gpu["index"], gpu_instance_id, profile_name),
    }


def with_mig_layout(hw: dict, gpu_index: int, profile_names: list) -> dict:
    """A copy of `hw` with MIG enabled on one GPU and one MIG device per listed profile (the
    `nvidia-smi mig -cgi … -C` result)."""
    new_hw = copy.deepcopy(hw)
    gpu = new_hw["gpus"][gpu_index]
    if not gpu["mig_capable"]:
        raise ValueError("%s does not support MIG" % gpu["name"])
    total_slices = sum(mig_profile(gpu, name)[1] for name in profile_names)
    if total_slices > 7:
        raise ValueError("MIG layout %s needs %d slices, the GPU has 7" % (",".join(profile_names), total_slices))
    gpu["mig_mode_current"] = gpu["mig_mode_pending"] = True
    gpu["mig_devices"] = [make_mig_device(gpu, hw["node"], index, name, gpu_instance_id=index + 1)
                          for index, name in enumerate(profile_names)]
    return new_hw
