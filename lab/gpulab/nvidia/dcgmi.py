"""The twin's DCGM command line, ``dcgmi`` (``up --dcgm``: installed on every node's disk as the datacenter-gpu-manager
package would, ``/usr/bin/dcgmi``). Runs inside a node: ``python3 -m gpulab.nvidia.dcgmi``; imports only ``smi``.

``dcgmi diag -r 1|2|3|4 [-j]`` (also ``--run``, ``--json``): the suite of the level over the GPUs on the bus, the
report in DCGM 3's JSON layout (``DCGM GPU Diagnostic`` > ``test_categories`` > ``tests`` > ``results`` per GPU,
statuses PASS/FAIL/WARN/SKIPPED; the layout of the collection's fixtures ``tests/unit/fixtures/dcgm``), after the
line dcgmi prints first. A test fails:
- under the node fault ``dcgm-fail:TEST[:GPU]`` (``TEST`` one of ``TESTS``' keys, GPU 0 by default);
- on every GPU that fell off the bus (Xid 79): the deployment checks name it, as NVML cannot reach it.
A failed test makes dcgmi exit non-zero (226) with the report still printed. Without a loaded driver the host
engine has nothing to talk to: the connection error, exit 255. ``dcgmi --version`` prints the version.
"""
from __future__ import annotations

import json
import os
import sys

from gpulab.nvidia import smi

VERSION = "3.3.9"
FAULTS_PATH = "/run/gpulab/faults.json"
PROC_VERSION = "/proc/driver/nvidia/version"
RC_TEST_FAILED = 226
RC_NO_HOST_ENGINE = 255
# fault name -> (category, DCGM 3 test name, lowest level that runs it)
TESTS = {
    "software": ("Deployment", "Denylist", 1),
    "nvml": ("Deployment", "NVML Library", 1),
    "cuda": ("Deployment", "CUDA Main Library", 1),
    "permissions": ("Deployment", "Permissions and OS Blocks", 1),
    "persistence": ("Deployment", "Persistence Mode", 1),
    "environment": ("Deployment", "Environmental Variables", 1),
    "page_retirement": ("Deployment", "Page Retirement/Row Remap", 1),
    "graphics_processes": ("Deployment", "Graphics Processes", 1),
    "inforom": ("Deployment", "Inforom", 1),
    "pcie": ("Integration", "PCIe", 2),
    "memory": ("Hardware", "GPU Memory", 2),
    "diagnostic": ("Hardware", "Diagnostic", 3),
    "sm_stress": ("Stress", "SM Stress", 3),
    "targeted_stress": ("Stress", "Targeted Stress", 3),
    "targeted_power": ("Stress", "Targeted Power", 3),
    "memory_bandwidth": ("Stress", "Memory Bandwidth", 3),
}
FAILURE_MESSAGES = {
    "memory": "Detected 1 double bit ECC error(s) on GPU %d.",
    "pcie": "Found 212 PCIe replays on GPU %d, exceeding the limit of 8.",
    "targeted_power": "Max power of 512.3 W did not reach the desired power minimum of 665.0 W for GPU %d.",
}


def _read(path: str, default):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle) if path.endswith(".json") else handle.read()
    except (OSError, ValueError):
        return default


def injected_failures(faults: list) -> dict:
    """test key -> GPU indexes that fail it, from the node's ``dcgm-fail:TEST[:GPU]`` faults."""
    failing = {}
    for kind in faults:
        parts = str(kind).split(":")
        if parts[0] == "dcgm-fail" and len(parts) >= 2 and parts[1] in TESTS:
            failing.setdefault(parts[1], set()).add(int(parts[2]) if len(parts) > 2 else 0)
    return failing


def diag_report(level: int, gpus: list, faults: list) -> tuple:
    """(report dict, any test failed) for the suite of ``level`` over ``gpus`` (hw.json GPUs, on bus or not)."""
    failing = injected_failures(faults)
    lost = [gpu["index"] for gpu in gpus if not gpu.get("on_bus", True)]
    categories, failed = [], False
    for key, (category, name, lowest) in TESTS.items():
        if lowest > level:
            continue
        results = []
        for gpu in gpus:
            index = gpu["index"]
            if index in lost and key == "nvml":
                results.append({"gpu_ids": str(index), "status": "FAIL", "warnings": [
                    {"warning": "GPU %d is lost: NVML cannot reach it (fell off the bus); reboot the system to "
                                "recover this GPU." % index, "error_id": 62}]})
            elif index in lost:
                results.append({"gpu_ids": str(index), "status": "SKIPPED"})
            elif index in failing.get(key, ()):
                message = FAILURE_MESSAGES.get(key, "%s failed on GPU %%d." % name) % index
                results.append({"gpu_ids": str(index), "status": "FAIL",
                                "warnings": [{"warning": message, "error_id": 1}]})
            else:
                results.append({"gpu_ids": str(index), "status": "PASS"})
        failed = failed or any(result["status"] == "FAIL" for result in results)
        entry = next((one for one in categories if one["category"] == category), None)
        if entry is None:
            entry = {"category": category, "tests": []}
            categories.append(entry)
        entry["tests"].append({"name": name, "results": results})
    return {"DCGM GPU Diagnostic": {"test_categories": categories, "version": VERSION}}, failed


def text_report(report: dict) -> str:
    lines = ["+---------------------------+------------------------------------------------+",
             "| Diagnostic                | Result                                         |",
             "+===========================+================================================+"]
    for category in report["DCGM GPU Diagnostic"]["test_categories"]:
        lines.append("|-----  %-20s-+------------------------------------------------|" % category["category"])
        for test in category["tests"]:
            statuses = {result["status"] for result in test["results"]}
            status = next((one for one in ("FAIL", "WARN", "PASS", "SKIPPED") if one in statuses), "SKIPPED")
            lines.append("| %-25s | %-46s |" % (test["name"], status.capitalize()))
    lines.append("+---------------------------+------------------------------------------------+")
    return "\n".join(lines) + "\n"


def usage() -> int:
    sys.stderr.write("Usage: dcgmi diag -r <1|2|3|4> [-j]\n")
    return 2


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--version"]:
        sys.stdout.write("dcgmi  version: %s\n" % VERSION)
        return 0
    if args[:1] != ["diag"]:
        return usage()
    level, as_json, rest = None, False, args[1:]
    while rest:
        arg = rest.pop(0)
        if arg in ("-r", "--run") and rest:
            value = rest.pop(0)
            level = {"quick": 1, "short": 1, "medium": 2, "long": 3, "xlong": 4}.get(value, value)
        elif arg in ("-j", "--json"):
            as_json = True
        else:
            return usage()
    try:
        level = int(level)
    except (TypeError, ValueError):
        return usage()
    if level not in (1, 2, 3, 4):
        return usage()
    if smi.kernel_driver_version(_read(PROC_VERSION, None)) is None:
        sys.stdout.write("Error: unable to establish a connection to the specified host: localhost\n"
                         "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n")
        return RC_NO_HOST_ENGINE
    hw = smi.load_node_hw(None)
    report, failed = diag_report(level, hw.get("gpus") or [], _read(FAULTS_PATH, []))
    sys.stdout.write("Successfully ran diagnostic for group.\n")
    sys.stdout.write(json.dumps(report, indent=2) + "\n" if as_json else text_report(report))
    return RC_TEST_FAILED if failed else 0


WRAPPER = """#!/bin/sh
# gpulab node twin: DCGM's dcgmi (lab/gpulab/nvidia/dcgmi.py), installed by `gpulab up --dcgm`
exec env PYTHONPATH=/opt/gpulab/lib /usr/bin/python3 -m gpulab.nvidia.dcgmi "$@"
"""


def install(root: str) -> str:
    """Put ``/usr/bin/dcgmi`` on a node's disk (``root``: the overlay's upper dir); returns its path."""
    path = os.path.join(root, "usr", "bin", "dcgmi")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(WRAPPER)
    os.chmod(path, 0o755)
    return path


if __name__ == "__main__":
    sys.exit(main())
