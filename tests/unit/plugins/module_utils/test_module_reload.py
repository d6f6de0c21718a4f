# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.nvidia.module_reload import (
    is_in_use_error,
    load_order,
    parse_main_pid,
    plan_reload,
    unload_order,
    version_key,
    workload_holders,
)

# lsmod on a host with the full driver stack (from the "NVML: Driver/library version mismatch" note the research
# cites: nvidia_uvm, nvidia_drm, nvidia_modeset used by nvidia_drm, nvidia used by nvidia_modeset and nvidia_uvm)
LOADED = ["nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"]


def test_unload_takes_the_users_of_nvidia_first_and_load_the_reverse():
    assert unload_order(LOADED) == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]
    assert unload_order(LOADED + ["nvidia_peermem"])[0] == "nvidia_peermem"
    assert load_order(unload_order(LOADED)) == ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"]
    assert unload_order(["nvidia"]) == ["nvidia"]


def test_a_module_older_than_the_userspace_with_nothing_holding_a_gpu_is_reloaded():
    plan = plan_reload("550.54.14", "550.54.15", "550.54.15", LOADED, [])
    assert plan["reload"] is True
    assert plan["unload"] == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]
    assert "older than the userspace 550.54.15" in plan["reason"]
    # an upgrade across branches compares numerically, not as text
    assert plan_reload("535.183.01", "550.54.15", "550.54.15", LOADED, [])["reload"] is True
    assert plan_reload("550.54.9", "550.54.15", "550.54.15", LOADED, [])["reload"] is True


def test_a_gpu_in_use_stops_the_reload_and_names_the_holders():
    plan = plan_reload("550.54.14", "550.54.15", "550.54.15", LOADED, ["pid 4242", "default/train"])
    assert plan["reload"] is False
    assert "in use (pid 4242, default/train)" in plan["reason"]


def test_no_reload_where_it_would_not_end_the_skew():
    # a newer module than the userspace (a downgrade, a library left behind): reload loads the same old library
    assert "newer than the userspace" in plan_reload("550.54.15", "550.54.14", "550.54.15", LOADED, [])["reason"]
    # the module on disk is not the userspace's (dkms did not build it for this kernel)
    plan = plan_reload("550.54.14", "550.54.15", "550.54.14", LOADED, [])
    assert plan["reload"] is False and "module on disk (550.54.14)" in plan["reason"]
    assert "not found" in plan_reload("550.54.14", "550.54.15", None, LOADED, [])["reason"]
    assert "no skew" in plan_reload("550.54.15", "550.54.15", "550.54.15", LOADED, [])["reason"]
    assert plan_reload(None, "550.54.15", "550.54.15", [], [])["reload"] is False
    assert plan_reload("550.54.14", None, "550.54.15", LOADED, [])["reload"] is False


def test_the_kernels_refusal_of_an_unload_is_recognised():
    assert is_in_use_error("modprobe: FATAL: Module nvidia is in use.\n")
    assert is_in_use_error("rmmod: ERROR: Module nvidia_uvm is in use\n")
    assert not is_in_use_error("modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.1.0-18-amd64")


def test_version_key():
    assert version_key("550.54.15\n") == (550, 54, 15)
    assert version_key("580.65") == (580, 65)
    assert version_key("") is None and version_key(None) is None and version_key("550.x") is None


def test_the_services_stopped_for_the_reload_do_not_count_as_holding_a_gpu():
    # systemd 252's `systemctl show --property=MainPID nvidia-persistenced.service`
    assert parse_main_pid("MainPID=1187\n") == 1187
    assert parse_main_pid("MainPID=0\n") is None and parse_main_pid("") is None
    assert workload_holders([1187, 4242, 4242], [1187, None]) == ["pid 4242"]
    assert workload_holders([1187], [1187]) == []
