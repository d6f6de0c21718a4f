# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Why the NVIDIA device plugin crash-loops (runbook case 3), read from the last lines of its log.

``crash_cause(text)`` takes the plugin container's log (``kubectl logs --previous`` or the current one) and returns
a plain dict: the cause, the line that proves it and the repair the runbook names for it. The messages are those
NVIDIA/k8s-device-plugin logs (``internal/plugin/server.go``, ``internal/plugin/factory.go``,
``internal/rm/device_map.go``, ``cmd/nvidia-device-plugin/main.go``), in klog's format or the older plain one.
Pure: no Ansible, no I/O.
"""

from __future__ import annotations

import re

# cause -> what the runbook does about it (docs/diagnose.md, "Case 3")
REPAIRS = {
    "version_skew": "reboot the node once nothing holds a GPU (the kernel module and the userspace differ)",
    "stale_socket": "delete the stale plugin socket on the node, then restart the device-plugin pod",
    "kubelet_not_registering": "restart the kubelet, then the device-plugin pod",
    "mig_strategy_mismatch": "fix the device plugin's MIG strategy or the node's MIG layout (no automatic change)",
    "nvml_unavailable": "install or load the NVIDIA driver on the node (diagnose layers L1-L2), then restart the "
                        "plugin",
    "unknown": "read the whole log (kubectl logs --previous); no known pattern matched",
}

_SOCKET_IN_USE = re.compile(r"listen unix (?P<socket>\S+?\.sock): bind: address already in use")
_KUBELET_SOCKET = re.compile(r"(?P<socket>/\S*?kubelet\.sock)")
_MIG_STRATEGY = re.compile(r"mig-strategy=\"?(?P<strategy>single|mixed|none)")
_MIG_STRATEGY_JSON = re.compile(r"\"migStrategy\":\s*\"(?P<strategy>single|mixed|none)\"")

# (cause, substrings any of which marks the line), most specific first: a line is given the first cause it matches
_PATTERNS = (
    ("version_skew", ("Driver/library version mismatch", "ERROR_LIB_RM_VERSION_MISMATCH")),
    ("stale_socket", ("bind: address already in use",)),
    ("mig_strategy_mismatch", ("invalid MIG configuration", "same migEnabled value",
                               "more than one MIG device type present on node", "--mig-strategy=mixed is not supported",
                               "was not configured correctly", "Invalid configuration detected for mig-strategy")),
    ("kubelet_not_registering", ("Could not register device plugin", "failed to register", "Could not contact Kubelet")),
    ("nvml_unavailable", ("ERROR_LIBRARY_NOT_FOUND", "ERROR_DRIVER_NOT_LOADED", "Driver Not Loaded",
                          "could not load NVML library", "nvml init failed")),
)


def classify_line(line):
    """The cause a single log line proves, or None."""
    for cause, markers in _PATTERNS:
        if any(marker in line for marker in markers):
            if cause == "kubelet_not_registering" and "kubelet" not in line.lower() and \
                    "Could not register device plugin" not in line:
                continue
            return cause
    return None


def crash_cause(text, tail=50):
    """The cause of a crash-looping plugin from its log ``text`` (its last ``tail`` lines are read):
    ``{"cause", "line", "repair", "socket", "mig_strategy"}``. The most recent line with a known pattern decides;
    ``cause`` is ``unknown`` when none matched (``line`` then is the last non-empty line, or None)."""
    lines = [line.rstrip() for line in (text or "").splitlines() if line.strip()]
    lines = lines[-tail:] if tail else lines
    result = {"cause": "unknown", "line": lines[-1] if lines else None, "socket": None,
              "mig_strategy": mig_strategy_of(text)}
    for line in reversed(lines):
        cause = classify_line(line)
        if cause is None:
            continue
        result.update(cause=cause, line=line)
        if cause == "stale_socket":
            match = _SOCKET_IN_USE.search(line)
            result["socket"] = match.group("socket") if match else None
        elif cause == "kubelet_not_registering":
            match = _KUBELET_SOCKET.search(line)
            result["socket"] = match.group("socket") if match else None
        break
    result["repair"] = REPAIRS[result["cause"]]
    return result


def mig_strategy_of(text):
    """The MIG strategy the plugin runs with, from its flags or its printed config; None when it does not say."""
    strategy = None
    for pattern in (_MIG_STRATEGY_JSON, _MIG_STRATEGY):
        for match in pattern.finditer(text or ""):
            strategy = match.group("strategy")
        if strategy:
            return strategy
    return None
