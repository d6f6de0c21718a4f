#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: bmc_power
short_description: Read or change a node's power through its BMC (Redfish first, IPMI as the fallback)
version_added: 0.1.0
description:
  - Reads the node's C(PowerState) from its BMC's Redfish service (C(/redfish/v1/Systems/<id>)) and, when the
    requested power state needs it, posts the matching C(ComputerSystem.Reset) action (C(On), C(ForceOff),
    C(ForceRestart), C(PowerCycle)).
  - When the BMC has no Redfish service (nothing answers, or C(/redfish/v1) is not found) and O(protocol=auto),
    falls back to C(ipmitool chassis power) over the network, the password passed in the environment (C(-E)),
    never on the command line.
  - A cold power cycle is how a GPU that fell off the bus (Xid 79) comes back when a GPU reset cannot be done.
  - Runs where the BMC can be reached from, usually the controller (C(delegate_to=localhost)).
author: gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Reads the power state and reports the reset it would send; sends nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  bmc_address:
    description:
      - The BMC's host name or address, or its Redfish base URL (C(https://host:port)); IPMI uses the host part.
    type: str
    required: true
  bmc_user:
    description:
      - The BMC user. Taken from the environment variable E(GPUOPS_BMC_USER) when not given.
    type: str
    required: true
  bmc_password:
    description:
      - The BMC password. Taken from the environment variable E(GPUOPS_BMC_PASSWORD) when not given; keep it in a
        vault or the environment, never in an inventory in clear.
    type: str
    required: true
  state:
    description:
      - V(status) only reads the power state.
      - V(on) powers the node on, V(off) cuts its power at once (C(ForceOff)), V(restart) is a forced restart
        (C(ForceRestart)), V(cycle) a cold power cycle (C(PowerCycle); the BMC's C(ForceRestart) when it offers
        no power cycle). V(on) and V(off) change nothing when the node is already there; V(cycle) and V(restart)
        of a node that is off power it on.
    type: str
    choices: [status, 'on', 'off', restart, cycle]
    default: status
  protocol:
    description:
      - V(auto) uses Redfish and falls back to IPMI when the BMC has no Redfish service; V(redfish) or V(ipmi)
        uses only that one.
    type: str
    choices: [auto, redfish, ipmi]
    default: auto
  system_id:
    description:
      - The Redfish ComputerSystem id (C(1), C(System.Embedded.1), ...); found from C(/redfish/v1/Systems) when
        the BMC has only one system.
    type: str
  validate_certs:
    description: Verify the BMC's TLS certificate.
    type: bool
    default: true
  ca_path:
    description: A PEM file of the CA that signed the BMC's certificate.
    type: path
  timeout:
    description: Seconds each request to the BMC (and each ipmitool run) may take.
    type: int
    default: 30
  ipmitool:
    description: Path or name of the C(ipmitool) program (the IPMI fallback).
    type: str
    default: ipmitool
  ipmi_interface:
    description: ipmitool's interface (C(-I)).
    type: str
    default: lanplus
"""

EXAMPLES = r"""
- name: Cold power cycle of a node whose GPU fell off the bus
  gpuops.nvidia.bmc_power:
    bmc_address: "{{ gpuops_bmc_address }}"
    state: cycle
    ca_path: /etc/pki/bmc-ca.pem
  environment:
    GPUOPS_BMC_USER: "{{ lookup('ansible.builtin.env', 'GPUOPS_BMC_USER') }}"
    GPUOPS_BMC_PASSWORD: "{{ vault_bmc_password }}"
  delegate_to: localhost

- name: Read the power state only
  gpuops.nvidia.bmc_power:
    bmc_address: https://10.0.9.21
    bmc_user: admin
    bmc_password: "{{ vault_bmc_password }}"
  delegate_to: localhost
  register: power
"""

RETURN = r"""
protocol:
  description: The protocol that answered, C(redfish) or C(ipmi).
  returned: success
  type: str
system_id:
  description: The Redfish ComputerSystem id used.
  returned: when Redfish answered
  type: str
power_state_before:
  description: The power state before any action (C(On), C(Off), C(PoweringOn), C(PoweringOff)).
  returned: success
  type: str
power_state:
  description: The power state read after the action (a power cycle may still show C(On) or C(PoweringOn)).
  returned: success
  type: str
reset_type:
  description: The Redfish ResetType sent (or that would be sent in check mode), null when nothing was needed.
  returned: success
  type: str
command:
  description: The ipmitool command run (without the password, which travels in the environment).
  returned: when IPMI answered
  type: list
  elements: str
fallback_reason:
  description: Why Redfish was not used, when O(protocol=auto) fell back to IPMI.
  returned: when the module fell back to IPMI
  type: str
"""

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.gpuops.nvidia.plugins.module_utils.bmc.power import (
    BmcError, BmcUnreachable, RedfishClient, ipmi_power, redfish_power)
from ansible_collections.gpuops.nvidia.plugins.module_utils.host.command import CommandRunner


def main():
    module = AnsibleModule(
        argument_spec=dict(
            bmc_address=dict(type="str", required=True),
            bmc_user=dict(type="str", required=True, fallback=(env_fallback, ["GPUOPS_BMC_USER"])),
            bmc_password=dict(type="str", required=True, no_log=True,
                              fallback=(env_fallback, ["GPUOPS_BMC_PASSWORD"])),
            state=dict(type="str", default="status", choices=["status", "on", "off", "restart", "cycle"]),
            protocol=dict(type="str", default="auto", choices=["auto", "redfish", "ipmi"]),
            system_id=dict(type="str"),
            validate_certs=dict(type="bool", default=True),
            ca_path=dict(type="path"),
            timeout=dict(type="int", default=30),
            ipmitool=dict(type="str", default="ipmitool"),
            ipmi_interface=dict(type="str", default="lanplus"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] < 1:
        module.fail_json(msg="timeout must be at least 1 second")
    fallback_reason = None
    try:
        if params["protocol"] != "ipmi":
            client = RedfishClient(params["bmc_address"], params["bmc_user"], params["bmc_password"],
                                   params["validate_certs"], params["ca_path"], params["timeout"])
            try:
                module.exit_json(**redfish_power(client, params["state"], params["system_id"], module.check_mode))
            except BmcUnreachable as error:
                if params["protocol"] == "redfish":
                    raise BmcError(str(error))
                fallback_reason = str(error)
        runner = CommandRunner(module, params["timeout"])
        ipmitool = params["ipmitool"] if "/" in params["ipmitool"] else runner.find(params["ipmitool"])
        if ipmitool is None:
            raise BmcError("%sipmitool is not installed" % (fallback_reason + "; " if fallback_reason else ""))
        result = ipmi_power(runner, ipmitool, params["bmc_address"], params["bmc_user"], params["bmc_password"],
                            params["state"], params["ipmi_interface"], module.check_mode)
    except BmcError as error:
        module.fail_json(msg=str(error), fallback_reason=fallback_reason)
    if fallback_reason:
        result["fallback_reason"] = fallback_reason
    module.exit_json(**result)


if __name__ == "__main__":
    main()
