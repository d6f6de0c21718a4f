# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Why the device plugin crash-loops (case 3), read from its log: tests/unit/fixtures/device_plugin_logs, built from
the messages NVIDIA/k8s-device-plugin logs (PROVENANCE.md there)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.device_plugin_logs import (
    REPAIRS, classify_line, crash_cause, mig_strategy_of)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "device_plugin_logs")


def read_fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


@pytest.mark.parametrize("name", ["version-skew_v0.17_CONSTRUCTED.log", "version-skew_gpulab-twin.log"])
def test_nvml_version_mismatch_is_version_skew(name):
    cause = crash_cause(read_fixture(name))
    assert cause["cause"] == "version_skew"
    assert "VERSION_MISMATCH" in cause["line"] or "version mismatch" in cause["line"]
    assert cause["repair"].startswith("reboot the node")


def test_plugin_socket_in_use_is_a_stale_socket_with_its_path():
    cause = crash_cause(read_fixture("stale-socket_v0.17_CONSTRUCTED.log"))
    assert cause["cause"] == "stale_socket"
    assert cause["socket"] == "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"
    assert cause["mig_strategy"] == "none"


def test_refused_kubelet_socket_is_kubelet_not_registering():
    cause = crash_cause(read_fixture("kubelet-not-registering_v0.17_CONSTRUCTED.log"))
    assert cause["cause"] == "kubelet_not_registering"
    assert cause["socket"] == "/var/lib/kubelet/device-plugins/kubelet.sock"
    assert cause["repair"] == "restart the kubelet, then the device-plugin pod"


def test_old_plugin_registration_timeout_is_kubelet_not_registering():
    cause = crash_cause(read_fixture("kubelet-not-registering_v1.0-format_CONSTRUCTED.log"))
    assert cause["cause"] == "kubelet_not_registering"
    assert "context deadline exceeded" in read_fixture("kubelet-not-registering_v1.0-format_CONSTRUCTED.log")


@pytest.mark.parametrize("name,message", [
    ("mig-strategy-single-mixed-layout_v0.17_CONSTRUCTED.log", "more than one MIG device type present on node"),
    ("mig-strategy-single-mig-and-full_v0.17_CONSTRUCTED.log", "same migEnabled value"),
])
def test_mig_layout_the_single_strategy_refuses_is_a_mig_strategy_mismatch(name, message):
    cause = crash_cause(read_fixture(name))
    assert cause["cause"] == "mig_strategy_mismatch"
    assert message in cause["line"]
    assert "no automatic change" in cause["repair"]


def test_strategy_is_read_from_the_printed_config():
    assert mig_strategy_of(read_fixture("mig-strategy-single-mixed-layout_v0.17_CONSTRUCTED.log")) == "single"
    assert mig_strategy_of("flags: --mig-strategy=mixed --fail-on-init-error") == "mixed"
    assert mig_strategy_of("nothing about it") is None


def test_healthy_log_has_no_cause_and_names_its_last_line():
    cause = crash_cause(read_fixture("healthy_gpulab-twin.log"))
    assert cause["cause"] == "unknown"
    assert cause["line"].endswith("Registered device plugin for 'nvidia.com/gpu' with Kubelet")
    assert crash_cause("")["line"] is None and crash_cause(None)["cause"] == "unknown"


def test_the_most_recent_known_line_decides():
    older_skew = read_fixture("version-skew_gpulab-twin.log")
    newer_socket = read_fixture("stale-socket_v0.17_CONSTRUCTED.log")
    assert crash_cause(older_skew + newer_socket)["cause"] == "stale_socket"
    assert crash_cause(newer_socket + older_skew)["cause"] == "version_skew"


def test_only_the_tail_is_read():
    text = read_fixture("version-skew_gpulab-twin.log") + "".join("line %d\n" % n for n in range(60))
    assert crash_cause(text, tail=50)["cause"] == "unknown"
    assert crash_cause(text, tail=0)["cause"] == "version_skew"


def test_library_not_found_is_not_a_skew_and_unrelated_refusals_are_not_kubelet():
    assert classify_line("Error: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND") == "nvml_unavailable"
    assert classify_line("failed to register metrics collector: connection refused") is None
    assert set(REPAIRS) == {"version_skew", "stale_socket", "kubelet_not_registering", "mig_strategy_mismatch",
                            "nvml_unavailable", "unknown"}
