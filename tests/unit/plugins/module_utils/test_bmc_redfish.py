# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Tests for the BMC power decisions (Redfish ComputerSystem.Reset, ipmitool fallback)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.bmc.redfish import (
    RedfishError, ipmi_power_state, ipmitool_argv, plan_reset, power_state, reset_action, reset_body, system_path)

# a ComputerSystem resource as DMTF's Redfish schema describes it (trimmed to what the helpers read)
SYSTEM = {
    "@odata.id": "/redfish/v1/Systems/1",
    "Id": "1",
    "PowerState": "On",
    "Actions": {"#ComputerSystem.Reset": {
        "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
        "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"],
    }},
}


def test_system_path_and_reset_action():
    assert system_path("1") == "/redfish/v1/Systems/1"
    assert reset_action(SYSTEM, "1") == ("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                                         ["On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"])
    assert reset_action({"PowerState": "On"}, "node-a") == (
        "/redfish/v1/Systems/node-a/Actions/ComputerSystem.Reset", None)
    with pytest.raises(ValueError):
        system_path("../Managers")


def test_power_state_is_required():
    assert power_state(SYSTEM) == "On"
    with pytest.raises(RedfishError):
        power_state({"Id": "1"})


@pytest.mark.parametrize("action, state, expected", [
    ("on", "On", None), ("on", "Off", "On"), ("off", "Off", None), ("off", "On", "ForceOff"),
    ("cycle", "On", "PowerCycle"), ("cycle", "Off", "On"), ("restart", "On", "ForceRestart"),
])
def test_plan_reset(action, state, expected):
    assert plan_reset(action, state, SYSTEM["Actions"]["#ComputerSystem.Reset"]["ResetType@Redfish.AllowableValues"]) \
        == expected


def test_cycle_falls_back_to_force_restart_and_refuses_what_the_bmc_disallows():
    assert plan_reset("cycle", "On", ["On", "ForceOff", "ForceRestart"]) == "ForceRestart"
    with pytest.raises(RedfishError):
        plan_reset("off", "On", ["On", "GracefulShutdown"])
    with pytest.raises(ValueError):
        plan_reset("explode", "On")


def test_reset_body():
    assert reset_body("PowerCycle") == {"ResetType": "PowerCycle"}
    with pytest.raises(ValueError):
        reset_body("Reboot")


def test_ipmitool_never_puts_the_password_on_the_command_line():
    argv = ipmitool_argv("/usr/bin/ipmitool", "10.0.0.5", "admin", "cycle")
    assert argv == ["/usr/bin/ipmitool", "-I", "lanplus", "-H", "10.0.0.5", "-U", "admin", "-E",
                    "chassis", "power", "cycle"]
    assert "-P" not in argv
    assert ipmitool_argv("ipmitool", "h", "u", "status")[-1] == "status"


def test_ipmi_power_state():
    assert ipmi_power_state("Chassis Power is on\n") == "On"
    assert ipmi_power_state("Chassis Power is off\n") == "Off"
    assert ipmi_power_state("Error: Unable to establish IPMI v2 / RMCP+ session\n") is None
