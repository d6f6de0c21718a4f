"""A BMC per node twin (``up --bmc``): DMTF Redfish over HTTPS on loopback, one server per node.

What a Redfish client of a real BMC sees, trimmed to power control:
- ``GET /redfish/v1`` (service root, no authentication, as Redfish allows), ``GET /redfish/v1/Systems``
  (collection with one member), ``GET /redfish/v1/Systems/1`` (ComputerSystem: ``PowerState`` On, Off,
  PoweringOn, PoweringOff, and ``Actions."#ComputerSystem.Reset"`` with its ``target`` and
  ``ResetType@Redfish.AllowableValues``);
- ``POST .../Actions/ComputerSystem.Reset`` ``{"ResetType": "On"|"ForceOff"|"ForceRestart"|"PowerCycle"}``:
  204 No Content, the node twin really cut (its PID 1 killed) and, but for ForceOff, booted again through the
  daemon's power path (the same one as ``gpulab power``); another ResetType is 400
  ``Base.1.8.ActionParameterValueNotInList``, a missing one 400 ``ActionParameterMissing``;
- HTTP Basic authentication on everything but the service root (401 with ``WWW-Authenticate``), the user and
  password in ``DIR/keys/bmc/credentials.json`` (0600); the servers' certificate is signed by a CA of their own,
  ``DIR/keys/bmc/ca.crt``, which clients trust as they would a site's BMC CA.
``lab.json`` ``bmc``: ``{ca_file, credentials_file, system_id, nodes: {name: url}}``.
"""
from __future__ import annotations

import base64
import hmac
import json
import os
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gpulab.kube.api import tls

SYSTEM_ID = "1"
SYSTEM_PATH = "/redfish/v1/Systems/" + SYSTEM_ID
RESET_PATH = SYSTEM_PATH + "/Actions/ComputerSystem.Reset"
RESET_TYPES = ("On", "ForceOff", "ForceRestart", "PowerCycle")
USER = "gpuops-bmc"
COLD_RESETS = ("ForceOff", "PowerCycle")


def power_state(status: str, busy: bool) -> str:
    """Redfish PowerState of a node twin in ``status`` (node.json), ``busy`` while a power action runs."""
    if status == "shutting-down":
        return "PoweringOff"
    if status in ("off", "down"):
        return "PoweringOn" if busy and status == "down" else "Off"
    return "On"


def power_request(reset_type: str, state: str):
    """The daemon's power action (``on``, ``off``, ``cycle``) a ResetType asks of a system in ``state``; None
    when the system is already where the reset type leaves it (On of a running system, ForceOff of an off one)."""
    off = state in ("Off", "PoweringOff")
    if reset_type == "On":
        return "on" if off else None
    if reset_type == "ForceOff":
        return None if off else "off"
    # a power cycle or forced restart of a system that is off powers it on
    return "on" if off else "cycle"


def _error(code: str, message: str) -> dict:
    return {"error": {"code": "Base.1.8.GeneralError", "message": message,
                      "@Message.ExtendedInfo": [{"MessageId": "Base.1.8." + code, "Message": message,
                                                 "Severity": "Warning"}]}}


class NodeBmc:
    """The BMC of one node twin: an HTTPS server on 127.0.0.1 (free port)."""

    def __init__(self, node_name: str, lab, credentials: tuple, context):
        self.node_name = node_name
        self.lab = lab
        self.credentials = credentials
        handler = type("Handler", (_Handler,), {"bmc": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = "https://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.resets = []

    def start(self) -> "NodeBmc":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def authorized(self, header) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        return hmac.compare_digest(user, self.credentials[0]) and hmac.compare_digest(password, self.credentials[1])

    def state(self) -> str:
        node = self.lab.node(self.node_name)
        return power_state(node.status, self.lab.busy(node))

    def system(self) -> dict:
        return {"@odata.id": SYSTEM_PATH, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
                "Id": SYSTEM_ID, "Name": "System", "HostName": self.node_name, "SystemType": "Physical",
                "Manufacturer": "gpulab", "Model": "GPU node twin", "PowerState": self.state(),
                "Status": {"State": "Enabled", "Health": "OK"},
                "Actions": {"#ComputerSystem.Reset": {"target": RESET_PATH,
                                                      "ResetType@Redfish.AllowableValues": list(RESET_TYPES)}}}

    def reset(self, reset_type: str) -> None:
        action = power_request(reset_type, self.state())
        self.lab.events.emit(self.node_name, "bmc-reset", reset_type=reset_type, action=action)
        self.resets.append(reset_type)
        if action is not None and reset_type in COLD_RESETS:
            # the power is removed: GPUs come back on the bus with their volatile error state gone (an Xid 79
            # that a GPU reset could not clear); a warm ForceRestart keeps them as they are
            node = self.lab.node(self.node_name)
            for kind in [one for one in node.faults if one.startswith("xid:")]:
                node.clear_fault(kind)
        if action is not None:
            answer = self.lab.power(self.node_name, action)
            if not answer.get("ok"):
                raise RuntimeError(answer.get("error") or "power %s failed" % action)


class _Handler(BaseHTTPRequestHandler):
    bmc = None
    timeout = 10
    server_version = "gpulab-bmc"

    def log_message(self, format, *args):   # noqa: A002 - the base class's name
        pass

    def _send(self, status: int, body=None, headers=None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
            self.send_header("OData-Version", "4.0")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def _authorized(self) -> bool:
        if self.bmc.authorized(self.headers.get("Authorization")):
            return True
        self._send(401, _error("InsufficientPrivilege", "authentication required"),
                   {"WWW-Authenticate": 'Basic realm="Redfish"'})
        return False

    def do_GET(self):   # noqa: N802 - http.server's name
        path = self._path()
        if path == "/redfish/v1":
            return self._send(200, {"@odata.id": "/redfish/v1", "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
                                    "Id": "RootService", "RedfishVersion": "1.17.0",
                                    "Systems": {"@odata.id": "/redfish/v1/Systems"}})
        if not self._authorized():
            return None
        if path == "/redfish/v1/Systems":
            return self._send(200, {"@odata.id": path, "Name": "Computer System Collection",
                                    "Members@odata.count": 1, "Members": [{"@odata.id": SYSTEM_PATH}]})
        if path == SYSTEM_PATH:
            return self._send(200, self.bmc.system())
        return self._send(404, _error("ResourceNotFound", "no resource at %s" % path))

    def do_POST(self):   # noqa: N802
        if not self._authorized():
            return None
        path = self._path()
        if path != RESET_PATH:
            return self._send(404 if not path.startswith(SYSTEM_PATH) else 405,
                              _error("ResourceNotFound", "no action at %s" % path))
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self._send(400, _error("MalformedJSON", "the request body is not JSON"))
        reset_type = body.get("ResetType") if isinstance(body, dict) else None
        if reset_type is None:
            return self._send(400, _error("ActionParameterMissing", "ResetType is missing"))
        if reset_type not in RESET_TYPES:
            return self._send(400, _error("ActionParameterValueNotInList",
                                          "ResetType %s is not one of %s" % (reset_type, ", ".join(RESET_TYPES))))
        try:
            self.bmc.reset(reset_type)
        except Exception as error:   # the daemon refused: the BMC answers 500 as a real one would
            return self._send(500, _error("InternalError", str(error)))
        return self._send(204)


class BmcFleet:
    """One NodeBmc per node twin, their CA, certificate and credentials under ``DIR/keys/bmc``."""

    def __init__(self, lab):
        self.lab = lab
        self.dir = os.path.join(lab.state_dir, "keys", "bmc")
        self.bmcs = {}

    def start(self) -> dict:
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        cert, key = tls.issue_server_certificate(self.dir, ip_addresses=("127.0.0.1",), dns_names=("localhost",))
        credentials_file = os.path.join(self.dir, "credentials.json")
        credentials = (USER, secrets.token_urlsafe(18))
        descriptor = os.open(credentials_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"username": credentials[0], "password": credentials[1]}, handle)
        context = tls.server_ssl_context(cert, key)
        for node in self.lab.nodes:
            self.bmcs[node.name] = NodeBmc(node.name, self.lab, credentials, context).start()
        return {"ca_file": os.path.join(self.dir, "ca.crt"), "credentials_file": credentials_file,
                "system_id": SYSTEM_ID, "nodes": {name: bmc.url for name, bmc in self.bmcs.items()}}

    def stop(self) -> None:
        for bmc in self.bmcs.values():
            bmc.stop()
        self.bmcs = {}
