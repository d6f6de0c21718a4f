"""The node twins' BMCs (``up --bmc``): Redfish over HTTPS on loopback whose power actions really cut and restart
the node, checked as a Redfish client of a real BMC would (the site's CA trusted, basic auth)."""
from __future__ import annotations

import base64
import json
import shutil
import ssl
import time
import urllib.error
import urllib.request

import pytest

from gpulab.testkit.lab import start_lab, stop_lab

NODE = "gpu-node-01"


@pytest.fixture(scope="module")
def bmc_lab(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("bmc") / "state")
    running = start_lab(state_dir, "--nodes", "1", "--bmc", "--boot-delay", "0.5", "--mok-timeout", "1")
    yield running
    stop_lab(running)
    shutil.rmtree(state_dir, ignore_errors=True)


class Redfish:
    def __init__(self, lab):
        bmc = lab.info["bmc"]
        self.url = bmc["nodes"][NODE]
        self.system = "/redfish/v1/Systems/%s" % bmc["system_id"]
        with open(bmc["credentials_file"], encoding="utf-8") as handle:
            credentials = json.load(handle)
        self.auth = "Basic " + base64.b64encode(
            ("%s:%s" % (credentials["username"], credentials["password"])).encode()).decode()
        self.context = ssl.create_default_context(cafile=bmc["ca_file"])

    def call(self, path, body=None, auth=True, context=None):
        request = urllib.request.Request(self.url + path, method="GET" if body is None else "POST",
                                         data=None if body is None else json.dumps(body).encode())
        request.add_header("Content-Type", "application/json")
        if auth:
            request.add_header("Authorization", self.auth if auth is True else auth)
        try:
            with urllib.request.urlopen(request, timeout=10, context=context or self.context) as answer:
                data = answer.read()
                return answer.status, json.loads(data) if data else None
        except urllib.error.HTTPError as error:
            data = error.read()
            return error.code, json.loads(data) if data else None

    def power_state(self):
        status, system = self.call(self.system)
        assert status == 200, system
        return system["PowerState"]

    def wait_power_state(self, state, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.power_state() == state:
                return
            time.sleep(0.2)
        raise AssertionError("PowerState not %s after %ss" % (state, timeout_s))


def test_the_bmc_speaks_https_with_its_own_ca_and_wants_credentials(bmc_lab):
    redfish = Redfish(bmc_lab)
    with pytest.raises(urllib.error.URLError) as refused:
        redfish.call("/redfish/v1", context=ssl.create_default_context())
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)
    status, root = redfish.call("/redfish/v1", auth=False)
    assert status == 200 and root["Systems"] == {"@odata.id": "/redfish/v1/Systems"}
    status, _ = redfish.call(redfish.system, auth=False)
    assert status == 401
    status, _ = redfish.call(redfish.system, auth="Basic " + base64.b64encode(b"gpuops-bmc:wrong").decode())
    assert status == 401
    status, systems = redfish.call("/redfish/v1/Systems")
    assert status == 200 and systems["Members"] == [{"@odata.id": redfish.system}]
    status, system = redfish.call(redfish.system)
    reset = system["Actions"]["#ComputerSystem.Reset"]
    assert system["PowerState"] == "On" and system["HostName"] == NODE
    assert reset["target"] == redfish.system + "/Actions/ComputerSystem.Reset"
    assert set(reset["ResetType@Redfish.AllowableValues"]) == {"On", "ForceOff", "ForceRestart", "PowerCycle"}


def test_an_unknown_reset_type_is_refused_and_changes_nothing(bmc_lab):
    redfish = Redfish(bmc_lab)
    boot_id = bmc_lab.node_status(NODE)["boot_id"]
    status, answer = redfish.call(redfish.system + "/Actions/ComputerSystem.Reset", {"ResetType": "Nmi"})
    assert status == 400
    assert answer["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith("ActionParameterValueNotInList")
    status, answer = redfish.call(redfish.system + "/Actions/ComputerSystem.Reset", {})
    assert status == 400 and answer["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith("ParameterMissing")
    assert bmc_lab.node_status(NODE)["boot_id"] == boot_id


def test_power_cycle_really_restarts_the_node(bmc_lab):
    redfish = Redfish(bmc_lab)
    before = bmc_lab.node_status(NODE)["boot_id"]
    bmc_lab.ssh(NODE, "echo survives-on-disk > /var/tmp/bmc-probe; sleep 600 >/dev/null 2>&1 &")
    bmc_lab.gpulab("fault", NODE, "xid:79:3")   # a GPU off the bus: only a cold power cycle brings it back
    since = time.time()
    status, _ = redfish.call(redfish.system + "/Actions/ComputerSystem.Reset", {"ResetType": "PowerCycle"})
    assert status == 204
    bmc_lab.wait_event(NODE, "bmc-reset", since)
    bmc_lab.wait_event(NODE, "up", since, timeout_s=90)
    after = bmc_lab.wait_status(NODE, "up", timeout_s=60)
    assert after["boot_id"] != before
    # a cold restart: the processes are gone, the disk stays
    assert bmc_lab.ssh(NODE, "pgrep -x sleep", check=False).returncode == 1
    assert bmc_lab.ssh(NODE, "cat /var/tmp/bmc-probe").stdout.strip() == "survives-on-disk"
    assert bmc_lab.ssh(NODE, "cat /proc/sys/kernel/random/boot_id").stdout.strip() == after["boot_id"]
    hw = json.loads(bmc_lab.ssh(NODE, "cat /run/gpulab/hw.json").stdout)
    assert all(gpu.get("on_bus", True) for gpu in hw["gpus"])
    assert "xid:79:3" not in bmc_lab.node_status(NODE)["faults"]
    redfish.wait_power_state("On")


def test_force_off_cuts_the_node_and_on_boots_it(bmc_lab):
    redfish = Redfish(bmc_lab)
    before = bmc_lab.node_status(NODE)["boot_id"]
    status, _ = redfish.call(redfish.system + "/Actions/ComputerSystem.Reset", {"ResetType": "ForceOff"})
    assert status == 204
    bmc_lab.wait_status(NODE, "off", timeout_s=30)
    redfish.wait_power_state("Off")
    assert bmc_lab.ssh(NODE, "true", check=False).returncode == 255
    # ForceOff of an off system changes nothing
    assert redfish.call(redfish.system + "/Actions/ComputerSystem.Reset", {"ResetType": "ForceOff"})[0] == 204
    assert bmc_lab.node_status(NODE)["status"] == "off"
    status, _ = redfish.call(redfish.system + "/Actions/ComputerSystem.Reset", {"ResetType": "On"})
    assert status == 204
    after = bmc_lab.wait_status(NODE, "up", timeout_s=90)
    assert after["boot_id"] != before
    redfish.wait_power_state("On")
