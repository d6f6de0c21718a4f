# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The real rollout_lock main() over real HTTP against a loopback server that keeps Leases as kube-apiserver does
(create refuses an existing name, a replace must carry the resourceVersion stored): the holder token that a second
run with the same run id cannot present, the resume of one's own run from its token file, the recorded steal of an
expired lock, a server that never answers, and the refusal of bad options naming the option."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.lease_lock import STOLEN_ANNOTATION, TOKEN_ANNOTATION
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import format_micro_time
from ansible_collections.gpuops.nvidia.plugins.modules import rollout_lock
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import isolate_warnings, patch_module_args

pytest.importorskip("kubernetes")

HOLDER = "sre@bastion/20261203T030000Z-1a2b"
PATH = "/apis/coordination.k8s.io/v1/namespaces/gpuops-system/leases"


class LeaseStore(BaseHTTPRequestHandler):
    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code, reason):
        self._send(code, {"kind": "Status", "code": code, "reason": reason, "message": reason})

    def _body(self):
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def do_GET(self):  # noqa: N802
        lease = self.server.leases.get(self.path.rsplit("/", 1)[1])
        self._send(200, lease) if lease else self._status(404, "NotFound")

    def do_POST(self):  # noqa: N802
        body = self._body()
        name = body["metadata"]["name"]
        if name in self.server.leases:
            return self._status(409, "AlreadyExists")
        return self._store(201, name, body)

    def do_PUT(self):  # noqa: N802
        body = self._body()
        name = self.path.rsplit("/", 1)[1]
        stored = self.server.leases.get(name)
        if stored is None:
            return self._status(404, "NotFound")
        if body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
            return self._status(409, "Conflict")
        return self._store(200, name, body)

    def _store(self, code, name, body):
        self.server.version += 1
        body["metadata"]["resourceVersion"] = str(self.server.version)
        self.server.leases[name] = body
        self.server.writes += 1
        self._send(code, body)

    def log_message(self, *args):
        pass


@pytest.fixture(name="api_server")
def fixture_api_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), LeaseStore)
    httpd.leases, httpd.version, httpd.writes = {}, 0, 0
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    httpd.url = "http://127.0.0.1:%d" % httpd.server_address[1]
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def run(capsys, monkeypatch, server_url, check_mode=False, **args):
    """(failed, result, printed output) of one module run."""
    isolate_warnings(monkeypatch)
    args = dict(dict(host=server_url, api_key="t0ken", namespace="gpuops-system", name="rollout", holder=HOLDER),
                **args)
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            rollout_lock.main()
    out = capsys.readouterr().out
    result = json.loads(out)
    return bool(result.get("failed")), result, out


def test_a_second_run_with_the_same_run_id_cannot_take_renew_or_release_the_live_lock(api_server, capsys,
                                                                                      monkeypatch, tmp_path):
    first, second = str(tmp_path / "a" / "run.lock-token"), str(tmp_path / "b" / "run.lock-token")
    failed, taken, out = run(capsys, monkeypatch, api_server.url, holder_token_file=first)
    assert not failed and taken["changed"] and taken["holder"] == HOLDER
    with open(first) as stream:
        token = stream.read().strip()
    assert len(token) >= 32 and token not in out
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(first)).st_mode) == 0o700
    lease = api_server.leases["rollout"]
    assert lease["metadata"]["annotations"][TOKEN_ANNOTATION] not in (token, "")
    assert token not in json.dumps(lease)
    writes = api_server.writes
    for state in ("acquired", "renewed", "released"):
        failed, refused, dummy = run(capsys, monkeypatch, api_server.url, state=state, holder_token_file=second)
        assert failed, state
        assert "does not hold its token (another run started with the same run id?)" in refused["msg"]
        assert refused["holder"] == HOLDER
    failed, refused, dummy = run(capsys, monkeypatch, api_server.url, state="released")   # no token at all
    assert failed and "does not hold its token" in refused["msg"]
    assert api_server.writes == writes and not os.path.exists(second)


def test_a_resumed_run_presents_its_token_file_and_holds_the_lock_again(api_server, capsys, monkeypatch, tmp_path):
    token_file = str(tmp_path / "run.lock-token")
    assert not run(capsys, monkeypatch, api_server.url, holder_token_file=token_file)[0]
    failed, again, dummy = run(capsys, monkeypatch, api_server.url, holder_token_file=token_file)
    assert not failed and not again["changed"] and again["msg"].startswith("already held by " + HOLDER)
    assert not run(capsys, monkeypatch, api_server.url, state="renewed", holder_token_file=token_file)[0]
    failed, released, dummy = run(capsys, monkeypatch, api_server.url, state="released", holder_token_file=token_file)
    assert not failed and released["changed"] and released["holder"] is None
    assert not os.path.exists(token_file)
    assert TOKEN_ANNOTATION not in (api_server.leases["rollout"]["metadata"].get("annotations") or {})


def test_check_mode_acquire_writes_neither_the_lease_nor_the_token_file(api_server, capsys, monkeypatch, tmp_path):
    token_file = str(tmp_path / "run.lock-token")
    failed, result, dummy = run(capsys, monkeypatch, api_server.url, check_mode=True, holder_token_file=token_file)
    assert not failed and result["changed"]
    assert api_server.writes == 0 and not os.path.exists(token_file)


def test_stealing_an_expired_lock_is_recorded_in_the_lease_and_the_result(api_server, capsys, monkeypatch, tmp_path):
    expired_at = time.time() - 60
    api_server.leases["rollout"] = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "rollout", "namespace": "gpuops-system", "resourceVersion": "3",
                     "annotations": {TOKEN_ANNOTATION: "0" * 64}},
        "spec": {"holderIdentity": "alice@bastion/run-1", "leaseDurationSeconds": 600,
                 "acquireTime": format_micro_time(expired_at - 600), "renewTime": format_micro_time(expired_at - 600)}}
    token_file = str(tmp_path / "oncall.lock-token")
    failed, refused, dummy = run(capsys, monkeypatch, api_server.url, holder="oncall@bastion/incident-1",
                                 holder_token_file=token_file)
    assert failed and "set steal_expired: true to take it over" in refused["msg"]
    failed, taken, dummy = run(capsys, monkeypatch, api_server.url, holder="oncall@bastion/incident-1",
                               holder_token_file=token_file, steal_expired=True)
    assert not failed and taken["msg"].startswith("took over the expired lock of alice@bastion/run-1")
    assert taken["stolen"]["by"] == "oncall@bastion/incident-1" and taken["stolen"]["from"] == "alice@bastion/run-1"
    assert taken["last_steal"] == taken["stolen"]
    recorded = json.loads(api_server.leases["rollout"]["metadata"]["annotations"][STOLEN_ANNOTATION])
    assert recorded == taken["stolen"] and set(recorded) == {"by", "at", "from", "expired_at"}
    assert api_server.leases["rollout"]["spec"]["leaseTransitions"] == 1


def test_a_token_file_others_can_read_is_refused_before_any_request(api_server, capsys, monkeypatch, tmp_path):
    token_file = tmp_path / "run.lock-token"
    token_file.write_text("x" * 43 + "\n")
    token_file.chmod(0o644)
    failed, result, dummy = run(capsys, monkeypatch, api_server.url, holder_token_file=str(token_file))
    assert failed and result["msg"].startswith("holder_token_file %s is readable by others (mode 0644)" % token_file)
    assert api_server.writes == 0 and "rollout" not in api_server.leases


def test_a_server_that_never_answers_fails_the_lock_at_request_timeout(capsys, monkeypatch):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    try:
        started = time.monotonic()
        failed, result, dummy = run(capsys, monkeypatch, "http://127.0.0.1:%d" % listener.getsockname()[1],
                                    request_timeout=1)
        elapsed = time.monotonic() - started
    finally:
        listener.close()
    assert failed and elapsed < 5
    assert result["msg"] == "read lease gpuops-system/rollout: GET %s/rollout: no answer within the read timeout" % PATH


@pytest.mark.parametrize("args, field, message", [
    (dict(ttl=0), "ttl", "ttl must be at least 1 second, got 0"),
    (dict(ttl=-30), "ttl", "ttl must be at least 1 second, got -30"),
    (dict(ttl="an hour"), "ttl", "ttl"),
    (dict(name=""), "name", "name must not be empty"),
    (dict(name="   "), "name", "name must not be empty"),
    (dict(name="GPU_Rollout"), "name", "name must be a DNS subdomain name"),
    (dict(name="rollout/../other"), "name", "name must be a DNS subdomain name"),
    (dict(name="a" * 254), "name", "name must be a DNS subdomain name"),
    (dict(namespace=""), "namespace", "namespace must not be empty"),
    (dict(namespace="Kube-System"), "namespace", "namespace must be a DNS subdomain name"),
    (dict(holder=""), "holder", "holder must not be empty"),
    (dict(holder="  "), "holder", "holder must not be empty"),
    (dict(holder_token_file=""), "holder_token_file", "holder_token_file must be a file path"),
    (dict(holder_token_file="/tmp/runs/"), "holder_token_file", "holder_token_file must be a file path"),
    (dict(state="renewed", steal_expired=True), "steal_expired", "steal_expired applies to state=acquired only"),
    (dict(state="taken"), "state", "value of state must be one of"),
    (dict(steal_expired="sometimes"), "steal_expired", "steal_expired"),
    (dict(request_timeout=0), "request_timeout", "request_timeout must be a positive number of seconds"),
    (dict(request_timeout=-2), "request_timeout", "request_timeout must be a positive number of seconds"),
    (dict(request_timeout="soon"), "request_timeout", "request_timeout"),
])
def test_bad_options_are_refused_naming_the_option_before_any_request(api_server, capsys, monkeypatch, args, field,
                                                                      message):
    failed, result, dummy = run(capsys, monkeypatch, api_server.url, **args)
    assert failed and message in result["msg"] and field in result["msg"]
    assert api_server.writes == 0


@pytest.mark.parametrize("content", ["short", "two words " * 8, ""])
def test_a_token_file_without_a_token_is_refused(api_server, capsys, monkeypatch, tmp_path, content):
    token_file = tmp_path / "run.lock-token"
    token_file.write_text(content)
    token_file.chmod(0o600)
    failed, result, dummy = run(capsys, monkeypatch, api_server.url, holder_token_file=str(token_file))
    assert failed and result["msg"] == "holder_token_file %s does not hold a token (one line of at least 32 " \
                                       "characters)" % token_file


def test_a_token_file_that_is_a_directory_is_refused(api_server, capsys, monkeypatch, tmp_path):
    failed, result, dummy = run(capsys, monkeypatch, api_server.url, holder_token_file=str(tmp_path))
    assert failed and result["msg"] == "holder_token_file %s is not a regular file" % tmp_path
