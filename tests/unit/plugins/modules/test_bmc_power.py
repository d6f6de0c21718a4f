# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Runs the real bmc_power main() against a Redfish service on loopback (a small HTTP server answering as DMTF's
ComputerSystem resource and Reset action describe, recording what it was sent) and, for the fallback, a stand-in
ipmitool on PATH that records its arguments and whether the password came in its environment."""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.bmc.power import ipmi_host, redfish_base_url
from ansible_collections.gpuops.nvidia.plugins.modules import bmc_power
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import patch_module_args

PASSWORD = "s3cret-bmc"


class Redfish(BaseHTTPRequestHandler):
    state = None   # per server: {"power": "On", "posts": [], "allowed": [...]}

    def log_message(self, *args):
        pass

    def reply(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorized(self):
        expected = "Basic " + base64.b64encode(("admin:%s" % PASSWORD).encode()).decode()
        if self.headers.get("Authorization") == expected:
            return True
        self.reply(401, {"error": {"code": "Base.1.8.GeneralError", "message": "unauthorized"}})
        return False

    def do_GET(self):
        if not self.authorized():
            return
        if self.path == "/redfish/v1/Systems":
            return self.reply(200, {"Members": [{"@odata.id": "/redfish/v1/Systems/System.Embedded.1"}]})
        if self.path == "/redfish/v1/Systems/System.Embedded.1":
            return self.reply(200, {"Id": "System.Embedded.1", "PowerState": self.state["power"], "Actions": {
                "#ComputerSystem.Reset": {
                    "target": "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset",
                    "ResetType@Redfish.AllowableValues": self.state["allowed"]}}})
        return self.reply(404)

    def do_POST(self):
        if not self.authorized():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.state["posts"].append((self.path, body))
        self.state["power"] = {"ForceOff": "Off"}.get(body["ResetType"], "On")
        return self.reply(204)


@pytest.fixture
def redfish():
    state = {"power": "On", "posts": [], "allowed": ["On", "ForceOff", "ForceRestart", "PowerCycle"]}
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (Redfish,), {"state": state}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = "http://127.0.0.1:%d" % server.server_address[1]
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def ipmitool(tmp_path, monkeypatch):
    """A stand-in ipmitool: records argv and IPMI_PASSWORD, answers 'Chassis Power is <state>'."""
    record, power = tmp_path / "calls", tmp_path / "power"
    power.write_text("on")
    script = tmp_path / "ipmitool"
    script.write_text(
        "#!/bin/sh\necho \"$* | $IPMI_PASSWORD\" >> %s\n"
        "for last; do :; done\n"
        "case \"$last\" in status) echo \"Chassis Power is $(cat %s)\";; off) echo off > %s;"
        " echo 'Chassis Power Control: Down/Off';; on|cycle|reset) echo on > %s;"
        " echo \"Chassis Power Control: $last\";; esac\n" % (record, power, power, power))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"path": str(script), "record": record, "power": power}


def run(capsys, **args):
    args.setdefault("bmc_user", "admin")
    args.setdefault("bmc_password", PASSWORD)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            bmc_power.main()
    return json.loads(capsys.readouterr().out)


def test_cycle_posts_power_cycle_to_the_discovered_system(redfish, capsys):
    result = run(capsys, bmc_address=redfish["url"], state="cycle")
    assert not result.get("failed"), result
    assert result["changed"] is True and result["protocol"] == "redfish"
    assert result["system_id"] == "System.Embedded.1" and result["reset_type"] == "PowerCycle"
    assert redfish["posts"] == [("/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset",
                                 {"ResetType": "PowerCycle"})]
    assert PASSWORD not in json.dumps(result)


def test_cycle_is_a_forced_restart_where_the_bmc_offers_no_power_cycle(redfish, capsys):
    redfish["allowed"] = ["On", "ForceOff", "ForceRestart"]
    result = run(capsys, bmc_address=redfish["url"], state="cycle")
    assert result["reset_type"] == "ForceRestart" and redfish["posts"][0][1] == {"ResetType": "ForceRestart"}


def test_on_of_a_running_node_and_check_mode_send_nothing(redfish, capsys):
    result = run(capsys, bmc_address=redfish["url"], state="on")
    assert result["changed"] is False and result["reset_type"] is None
    result = run(capsys, bmc_address=redfish["url"], state="off", _ansible_check_mode=True)
    assert result["changed"] is True and result["reset_type"] == "ForceOff" and result["power_state"] == "On"
    assert redfish["posts"] == []


def test_off_then_cycle_of_an_off_node_powers_it_on(redfish, capsys):
    assert run(capsys, bmc_address=redfish["url"], state="off")["power_state"] == "Off"
    result = run(capsys, bmc_address=redfish["url"], state="cycle")
    assert result["power_state_before"] == "Off" and result["reset_type"] == "On"
    assert result["power_state"] == "On"


def test_wrong_credentials_fail_without_falling_back(redfish, ipmitool, capsys):
    result = run(capsys, bmc_address=redfish["url"], bmc_password="wrong", state="cycle",
                 ipmitool=ipmitool["path"])
    assert result["failed"] is True and "refused the credentials" in result["msg"]
    assert not ipmitool["record"].exists() and redfish["posts"] == []


def test_no_redfish_service_falls_back_to_ipmitool_with_the_password_in_the_environment(ipmitool, capsys):
    # nothing listens on loopback port 9: connection refused, as a BMC without Redfish
    result = run(capsys, bmc_address="http://127.0.0.1:9", state="cycle", ipmitool=ipmitool["path"], timeout=5)
    assert not result.get("failed"), result
    assert result["protocol"] == "ipmi" and "cannot reach" in result["fallback_reason"]
    calls = ipmitool["record"].read_text().splitlines()
    assert calls[1] == "-I lanplus -H 127.0.0.1 -U admin -E chassis power cycle | %s" % PASSWORD
    assert all(PASSWORD not in call.split(" | ")[0] for call in calls)
    assert PASSWORD not in json.dumps(result) and "IPMI_PASSWORD" not in os.environ


def test_protocol_redfish_does_not_fall_back(ipmitool, capsys):
    result = run(capsys, bmc_address="http://127.0.0.1:9", state="status", protocol="redfish",
                 ipmitool=ipmitool["path"], timeout=5)
    assert result["failed"] is True and "cannot reach" in result["msg"]
    assert not ipmitool["record"].exists()


def test_ipmi_off_of_an_off_node_changes_nothing(ipmitool, capsys):
    ipmitool["power"].write_text("off")
    result = run(capsys, bmc_address="10.0.9.21", state="off", protocol="ipmi", ipmitool=ipmitool["path"])
    assert result["changed"] is False and result["power_state"] == "Off"
    assert len(ipmitool["record"].read_text().splitlines()) == 1


def test_credentials_come_from_the_environment(redfish, monkeypatch, capsys):
    monkeypatch.setenv("GPUOPS_BMC_USER", "admin")
    monkeypatch.setenv("GPUOPS_BMC_PASSWORD", PASSWORD)
    with patch_module_args({"bmc_address": redfish["url"]}):
        with pytest.raises(SystemExit):
            bmc_power.main()
    result = json.loads(capsys.readouterr().out)
    assert result["power_state"] == "On" and result["changed"] is False


def test_addresses():
    assert redfish_base_url("10.0.9.21") == "https://10.0.9.21"
    assert redfish_base_url("https://bmc-7:8443/") == "https://bmc-7:8443"
    assert ipmi_host("https://bmc-7:8443/redfish") == "bmc-7"
    assert ipmi_host("10.0.9.21") == "10.0.9.21"
    assert ipmi_host("https://[fd00::7]:443") == "fd00::7"
