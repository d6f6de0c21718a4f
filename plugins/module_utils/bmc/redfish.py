# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A node's power through its BMC: Redfish (DMTF ComputerSystem) decisions, and the IPMI fallback's argument list.

Redfish: GET /redfish/v1/Systems/<id> answers PowerState (On, Off, PoweringOn, PoweringOff, Paused) and, under
Actions."#ComputerSystem.Reset", the action's target and the ResetType values the BMC allows
(ResetType@Redfish.AllowableValues, optional); POST {"ResetType": ...} to the target resets the system.
Pure code, no I/O: the request itself belongs to the module's HTTP path.
"""

from __future__ import annotations

RESET_TYPES = ("On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn",
               "PushPowerButton", "PowerCycle")
# what the module's power states ask of the BMC, Redfish reset type and ipmitool chassis power verb
ACTIONS = {
    "on": ("On", "on"),
    "off": ("ForceOff", "off"),
    "restart": ("ForceRestart", "reset"),
    "cycle": ("PowerCycle", "cycle"),
}
# the PowerState that shows an action needs nothing (None: the action always acts)
SATISFIED_BY = {"on": "On", "off": "Off", "restart": None, "cycle": None}


class RedfishError(ValueError):
    """The BMC's answer is not what Redfish describes."""


def system_path(system_id):
    """The path of a ComputerSystem resource."""
    if not system_id or "/" in system_id:
        raise ValueError("a Redfish system id is one path segment, not %r" % (system_id,))
    return "/redfish/v1/Systems/%s" % system_id


def power_state(system):
    """PowerState of a ComputerSystem resource (a dict)."""
    state = system.get("PowerState") if isinstance(system, dict) else None
    if not isinstance(state, str) or not state:
        raise RedfishError("the system resource has no PowerState")
    return state


def reset_action(system, system_id):
    """(target path, allowed reset types or None when the BMC does not say) of the system's Reset action."""
    actions = (system.get("Actions") or {}) if isinstance(system, dict) else {}
    reset = actions.get("#ComputerSystem.Reset") or {}
    target = reset.get("target") or system_path(system_id) + "/Actions/ComputerSystem.Reset"
    allowed = reset.get("ResetType@Redfish.AllowableValues")
    return target, (list(allowed) if isinstance(allowed, list) else None)


def plan_reset(action, state, allowed=None):
    """The ResetType to POST for action in the current PowerState, or None when nothing is to do.

    An 'on' of a powered-off node with no PowerCycle is On; a 'cycle' of a node that is off is On (a power cycle
    of an off system only powers it on); a reset type the BMC does not allow raises RedfishError.
    """
    if action not in ACTIONS:
        raise ValueError("unknown power action %r (one of %s)" % (action, ", ".join(sorted(ACTIONS))))
    if SATISFIED_BY[action] is not None and state == SATISFIED_BY[action]:
        return None
    reset_type = ACTIONS[action][0]
    if action in ("cycle", "restart") and state == "Off":
        reset_type = "On"
    if allowed is not None and reset_type not in allowed:
        if action == "cycle" and "ForceRestart" in allowed:
            return "ForceRestart"
        raise RedfishError("the BMC does not allow ResetType %s (allowed: %s)" % (reset_type, ", ".join(allowed)))
    return reset_type


def reset_body(reset_type):
    """The JSON body of the Reset action."""
    if reset_type not in RESET_TYPES:
        raise ValueError("unknown Redfish ResetType %r" % (reset_type,))
    return {"ResetType": reset_type}


def ipmitool_argv(ipmitool, host, user, action, interface="lanplus"):
    """ipmitool's argument list for action; the password travels in the IPMI_PASSWORD environment variable (-E),
    never on the command line."""
    if action == "status":
        verb = "status"
    elif action in ACTIONS:
        verb = ACTIONS[action][1]
    else:
        raise ValueError("unknown power action %r" % (action,))
    return [ipmitool, "-I", interface, "-H", host, "-U", user, "-E", "chassis", "power", verb]


def ipmi_power_state(text):
    """On or Off from 'Chassis Power is on|off'."""
    for line in text.splitlines():
        line = line.strip().lower()
        if line.startswith("chassis power is "):
            return "On" if line.endswith(" on") else "Off" if line.endswith(" off") else None
    return None
