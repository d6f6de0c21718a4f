# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""A node's power through its BMC, the engine: Redfish first (HTTPS, basic auth, a timeout on every request),
``ipmitool`` as the fallback (through the collection's one command runner, the password in the environment).

``bmc_power(...)`` returns the result dict the ``bmc_power`` module exits with; the decisions are in
``redfish.py``.
"""

from __future__ import annotations

import json
import os
import socket
from urllib.error import HTTPError, URLError

from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url

from ansible_collections.gpuops.nvidia.plugins.module_utils.bmc.redfish import (
    RedfishError, ipmi_power_state, ipmitool_argv, plan_reset, power_state, reset_action, reset_body, system_path)

# ResetType -> the power action ipmitool's chassis power verb does the same with
IPMI_ACTION_OF_RESET = {"On": "on", "ForceOff": "off", "ForceRestart": "restart", "PowerCycle": "cycle"}


class BmcUnreachable(Exception):
    """No Redfish answer came (refused, TLS, timeout): the caller may fall back to IPMI."""


class BmcError(Exception):
    """The BMC answered, but not with what was asked."""


def redfish_base_url(address):
    """https://address unless address is already a URL."""
    address = address.rstrip("/")
    return address if address.startswith(("https://", "http://")) else "https://" + address


def ipmi_host(address):
    """The host part of an address or URL (what ipmitool's -H takes)."""
    host = address.split("://", 1)[-1].split("/", 1)[0]
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class RedfishClient:
    """One BMC's Redfish service: base URL, basic auth, TLS settings and a timeout on every request."""

    def __init__(self, address, user, password, validate_certs=True, ca_path=None, timeout=30):
        self.base_url = redfish_base_url(address)
        self.user = user
        self.password = password
        self.validate_certs = validate_certs
        self.ca_path = ca_path
        self.timeout = timeout

    def request(self, method, path, body=None):
        """(status, decoded JSON or None) of one request; BmcUnreachable when no HTTP answer came."""
        try:
            answer = open_url(self.base_url + path, method=method, data=None if body is None else json.dumps(body),
                              headers={"Accept": "application/json", "Content-Type": "application/json"},
                              url_username=self.user, url_password=self.password, force_basic_auth=True,
                              validate_certs=self.validate_certs, ca_path=self.ca_path, timeout=self.timeout)
            status, text = answer.getcode(), answer.read()
        except HTTPError as error:
            try:
                status, text = error.code, error.read()
            except (IOError, OSError, AttributeError):
                status, text = error.code, b""
        except (URLError, UrlConnectionError, socket.timeout, OSError) as error:
            reason = getattr(error, "reason", None) or error
            raise BmcUnreachable("cannot reach the BMC's Redfish service at %s: %s" % (self.base_url,
                                                                                       to_native(reason)))
        text = to_text(text, errors="surrogate_or_replace")
        try:
            return status, json.loads(text) if text.strip() else None
        except ValueError:
            return status, None

    def get(self, path):
        status, body = self.request("GET", path)
        if status == 404 and path.startswith("/redfish/v1") and path.count("/") <= 2:
            raise BmcUnreachable("%s has no Redfish service (404 on %s)" % (self.base_url, path))
        if status in (401, 403):
            raise BmcError("the BMC refused the credentials (HTTP %d on %s)" % (status, path))
        if status != 200 or not isinstance(body, dict):
            raise BmcError("GET %s answered HTTP %d%s" % (path, status, error_message(body)))
        return body

    def system_id(self):
        """The id of the service's only ComputerSystem (a BMC with several needs system_id)."""
        members = self.get("/redfish/v1/Systems").get("Members") or []
        ids = [str(member.get("@odata.id", "")).rstrip("/").rsplit("/", 1)[-1] for member in members]
        if len(ids) != 1 or not ids[0]:
            raise BmcError("the BMC has %d systems (%s): set system_id" % (len(ids), ", ".join(ids)))
        return ids[0]


def error_message(body):
    """': <message>' of a Redfish error body, '' without one."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ""
    infos = error.get("@Message.ExtendedInfo") or []
    message = infos[0].get("Message") if infos and isinstance(infos[0], dict) else None
    return ": %s" % (message or error.get("message") or error.get("code"))


def redfish_power(client, action, system_id=None, check_mode=False):
    """Read the PowerState, POST the ResetType the action needs (not in check mode); the module's result."""
    system_id = system_id or client.system_id()
    path = system_path(system_id)
    system = client.get(path)
    before = power_state(system)
    result = {"protocol": "redfish", "system_id": system_id, "power_state_before": before, "power_state": before,
              "reset_type": None, "changed": False}
    if action == "status":
        return result
    target, allowed = reset_action(system, system_id)
    try:
        reset_type = plan_reset(action, before, allowed)
    except RedfishError as error:
        raise BmcError(str(error))
    result.update(reset_type=reset_type, changed=reset_type is not None)
    if reset_type is None or check_mode:
        return result
    status, body = client.request("POST", target, reset_body(reset_type))
    if status not in (200, 202, 204):
        raise BmcError("ResetType %s was refused (HTTP %d%s)" % (reset_type, status, error_message(body)))
    result["power_state"] = power_state(client.get(path))
    return result


def ipmi_power(runner, ipmitool, address, user, password, action, interface="lanplus", check_mode=False):
    """The same through ``ipmitool chassis power``; the password goes in IPMI_PASSWORD (ipmitool -E), never
    on the command line, and leaves the environment again."""
    host = ipmi_host(address)
    os.environ["IPMI_PASSWORD"] = password
    try:
        status_argv = ipmitool_argv(ipmitool, host, user, "status", interface)
        answer = runner.run(status_argv)
        before = ipmi_power_state(answer.stdout)
        if answer.rc != 0 or before is None:
            raise BmcError("ipmitool chassis power status failed (rc %d): %s" % (answer.rc,
                                                                                 answer.first_error_line()))
        result = {"protocol": "ipmi", "power_state_before": before, "power_state": before, "reset_type": None,
                  "changed": False, "command": status_argv}
        if action == "status":
            return result
        reset_type = plan_reset(action, before, list(IPMI_ACTION_OF_RESET))
        result.update(reset_type=reset_type, changed=reset_type is not None)
        if reset_type is None:
            return result
        argv = ipmitool_argv(ipmitool, host, user, IPMI_ACTION_OF_RESET[reset_type], interface)
        result["command"] = argv
        if check_mode:
            return result
        done = runner.run(argv)
        if done.rc != 0:
            raise BmcError("ipmitool chassis power %s failed (rc %d): %s" % (argv[-1], done.rc,
                                                                             done.first_error_line()))
        after = runner.run(status_argv)
        result["power_state"] = ipmi_power_state(after.stdout) or before
        return result
    finally:
        os.environ.pop("IPMI_PASSWORD", None)
