# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Runs the real module main() over real HTTP (open_url) against a loopback server that replays answers a real
Prometheus gave (tests/unit/fixtures/prometheus). lab/tests/test_prometheus_gate.py runs it against a live one.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import socket
import threading
import urllib.parse

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import prometheus_gate
from ansible_collections.gpuops.nvidia.tests.unit.plugins.modules.utils import isolate_warnings, patch_module_args

FIXTURES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "prometheus"))
STATUS_OF = {"query_error_bad_data_400.json": 400, "query_error_execution_422.json": 422, "not_found_404.txt": 404}
TEMPERATURE = {"name": "gpu temperature", "query": "DCGM_FI_DEV_GPU_TEMP", "op": "<", "threshold": 95}


def fixture_answer(name):
    with open(os.path.join(FIXTURES, name), "rb") as fixture:
        return STATUS_OF.get(name, 200), fixture.read()


class ReplayPrometheus:
    """Answers /api/v1/query by the query's text and /api/v1/alerts with fixture bodies; records each request.
    ``answers[key]`` is a list of fixture names: one per call, the last one repeated."""

    def __init__(self):
        self.answers = {}
        self.requests = []
        replay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                self.answer(form.get("query", [""])[0])

            def do_GET(self):  # noqa: N802
                self.answer(None)

            def answer(self, query):
                path = urllib.parse.urlsplit(self.path).path
                replay.requests.append({"path": path, "query": query,
                                        "authorization": self.headers.get("Authorization")})
                names = replay.answers.get(query if path == "/api/v1/query" else path) or ["not_found_404.txt"]
                name = names.pop(0) if len(names) > 1 else names[0]
                status, body = fixture_answer(name)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """module.warn() collects into a process-wide store; give each in-process run its own."""
    isolate_warnings(monkeypatch)


@pytest.fixture
def prometheus():
    replay = ReplayPrometheus()
    replay.answers = {
        "DCGM_FI_DEV_GPU_TEMP": ["query_vector_gpu_temp.json"],
        'DCGM_FI_DEV_XID_ERRORS{gpu="7"}': ["query_vector_empty.json"],
        "scalar(max(DCGM_FI_DEV_GPU_TEMP))": ["query_scalar.json"],
        "DCGM_FI_DEV_GPU_TEMP >": ["query_error_bad_data_400.json"],
        "DCGM_FI_DEV_GPU_TEMP[3s]": ["query_matrix.json"],
        "/api/v1/alerts": ["alerts_firing_xid_pending_temperature.json"],
    }
    yield replay
    replay.close()


def closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_module(capsys, check_mode=False, **args):
    """(exit code, result dict) of one module run."""
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            prometheus_gate.main()
    return exit_info.value.code, json.loads(capsys.readouterr().out)


def test_values_under_threshold_pass_with_per_query_values(prometheus, capsys):
    rc, result = run_module(capsys, url=prometheus.url, queries=[TEMPERATURE])
    assert rc == 0, result["msg"]
    assert result["passed"] is True and result["changed"] is False
    assert result["evaluations"] == 1 and result["violations"] == []
    query = result["queries"][0]
    assert (query["name"], query["op"], query["threshold"], query["aggregate"], query["required"]) == (
        "gpu temperature", "<", 95.0, "each", True)
    assert [(value["labels"]["gpu"], value["value"]) for value in query["values"]] == [("0", 91.0), ("1", 42.0)]
    assert result["alerts_firing"] == []
    assert [request["path"] for request in prometheus.requests] == ["/api/v1/query"]


def test_answer_warnings_are_task_warnings_and_do_not_fail(prometheus, capsys):
    prometheus.answers["DCGM_FI_DEV_GPU_TEMP"] = ["query_vector_with_warning_CONSTRUCTED.json"]
    rc, result = run_module(capsys, url=prometheus.url, queries=[TEMPERATURE])
    assert rc == 0 and result["passed"] is True
    assert result["queries"][0]["warnings"] == [
        "partial response: store 10.0.0.7:10901 unreachable (constructed example)"]
    assert "query 'gpu temperature': Prometheus warns: partial response" in json.dumps(result["warnings"])


def test_a_value_over_threshold_fails_naming_query_and_series(prometheus, capsys):
    rc, result = run_module(capsys, url=prometheus.url, queries=[dict(TEMPERATURE, threshold=85)])
    assert rc == 1 and result["failed"] is True and result["passed"] is False
    assert result["msg"].startswith("prometheus gate failed at evaluation 1 after ")
    assert "query 'gpu temperature': {" in result["msg"] and "} is 91, not < 85" in result["msg"]
    assert len(result["violations"]) == 1


def test_aggregate_and_scalar_queries(prometheus, capsys):
    rc, result = run_module(capsys, url=prometheus.url, queries=[
        dict(TEMPERATURE, name="hottest", aggregate="max", threshold=92),
        {"name": "scalar", "query": "scalar(max(DCGM_FI_DEV_GPU_TEMP))", "op": "<=", "threshold": 91},
        {"name": "gpus", "query": "DCGM_FI_DEV_GPU_TEMP", "aggregate": "count", "op": "==", "threshold": 2},
    ])
    assert rc == 0, result["msg"]
    assert [query["values"][0]["value"] for query in result["queries"]] == [91.0, 91.0, 91.0]


def test_unreachable_prometheus_fails_closed_naming_the_query(capsys):
    url = "http://127.0.0.1:%d" % closed_port()
    rc, result = run_module(capsys, url=url, queries=[TEMPERATURE], firing_alerts={})
    assert rc == 1 and result["passed"] is False
    assert result["queries"][0]["error"].startswith("cannot reach Prometheus at %s: " % url)
    assert result["violations"][0].startswith("query 'gpu temperature' (DCGM_FI_DEV_GPU_TEMP) failed: cannot reach")
    assert result["violations"][1].startswith("alerts could not be read: cannot reach Prometheus")


def test_query_error_fails_with_prometheus_message(prometheus, capsys):
    rc, result = run_module(capsys, url=prometheus.url, queries=[
        TEMPERATURE, {"name": "broken", "query": "DCGM_FI_DEV_GPU_TEMP >", "op": "<", "threshold": 1}])
    assert rc == 1
    assert result["violations"] == [
        "query 'broken' (DCGM_FI_DEV_GPU_TEMP >) failed: HTTP 400, bad_data: invalid parameter \"query\": 1:23: "
        "parse error: unexpected end of input"]
    assert result["queries"][0]["passed"] is True


def test_a_path_that_is_not_the_api_fails_closed(prometheus, capsys):
    rc, result = run_module(capsys, url=prometheus.url + "/prometheus", queries=[TEMPERATURE])
    assert rc == 1
    assert "HTTP 404, not a Prometheus API answer: '404 page not found'" in result["violations"][0]


def test_range_vector_query_fails_with_the_fix(prometheus, capsys):
    rc, result = run_module(capsys, url=prometheus.url, queries=[dict(TEMPERATURE, query="DCGM_FI_DEV_GPU_TEMP[3s]")])
    assert rc == 1 and "max_over_time()" in result["msg"]


def test_required_empty_result_fails_and_optional_passes(prometheus, capsys):
    xid = {"name": "xid", "query": 'DCGM_FI_DEV_XID_ERRORS{gpu="7"}', "op": "==", "threshold": 0}
    rc, result = run_module(capsys, url=prometheus.url, queries=[xid])
    assert rc == 1 and "returned no data" in result["msg"]
    rc, result = run_module(capsys, url=prometheus.url, queries=[dict(xid, required=False)])
    assert rc == 0 and result["queries"][0]["values"] == []


def test_firing_alert_fails_the_gate_and_pending_ones_do_not(prometheus, capsys):
    rc, result = run_module(capsys, url=prometheus.url, firing_alerts={})
    assert rc == 1
    assert [alert["name"] for alert in result["alerts_firing"]] == ["GPUXidError"]
    assert result["violations"][0].startswith("alert GPUXidError is firing {")
    rc, result = run_module(capsys, url=prometheus.url,
                            firing_alerts={"names": ["GPUTemperatureHigh", "GPUAllocatableZero"]})
    assert rc == 0 and result["alerts_firing"] == []
    rc, result = run_module(capsys, url=prometheus.url, firing_alerts={"matchers": ['Hostname="gpu-node-02"']})
    assert rc == 0


def test_soak_evaluates_at_start_each_interval_and_end(prometheus, capsys):
    rc, result = run_module(capsys, url=prometheus.url, queries=[TEMPERATURE], duration=2, interval=1)
    assert rc == 0, result["msg"]
    assert result["evaluations"] == 3
    assert 2.0 <= result["elapsed"] < 4.0


def test_soak_stops_at_the_first_failing_evaluation(prometheus, capsys):
    prometheus.answers["DCGM_FI_DEV_GPU_TEMP"] = ["query_vector_max_by_hostname.json",
                                                  "query_vector_max_by_hostname.json", "not_found_404.txt"]
    rc, result = run_module(capsys, url=prometheus.url, queries=[TEMPERATURE], duration=30, interval=1)
    assert rc == 1
    assert result["evaluations"] == 3
    assert result["elapsed"] < 10
    assert result["msg"].startswith("prometheus gate failed at evaluation 3 after ")


def test_check_mode_evaluates_once_and_reports_without_failing(prometheus, capsys):
    rc, result = run_module(capsys, check_mode=True, url=prometheus.url, queries=[dict(TEMPERATURE, threshold=85)],
                            duration=600, interval=1)
    assert rc == 0 and "failed" not in result
    assert result["passed"] is False and result["evaluations"] == 1
    # ansible-core 2.19+ returns warnings as structured summaries, older releases as strings
    assert "prometheus gate failed at evaluation 1" in json.dumps(result["warnings"])


def test_bearer_token_is_sent_and_kept_out_of_the_result(prometheus, capsys):
    token = "s3cr3t-gate-token"
    rc, result = run_module(capsys, url=prometheus.url, bearer_token=token, queries=[TEMPERATURE], firing_alerts={
        "names": ["GPUTemperatureHigh"]})
    assert rc == 0
    assert [request["authorization"] for request in prometheus.requests] == ["Bearer " + token] * 2
    assert token not in json.dumps(result)


def test_basic_auth_is_sent_and_the_password_kept_out_of_the_result(prometheus, capsys):
    password = "s3cr3t-gate-password"
    rc, result = run_module(capsys, url=prometheus.url, url_username="gate", url_password=password,
                            queries=[TEMPERATURE])
    assert rc == 0
    expected = "Basic " + base64.b64encode(("gate:" + password).encode()).decode()
    assert [request["authorization"] for request in prometheus.requests] == [expected]
    assert password not in json.dumps(result)


@pytest.mark.parametrize("args, message", [
    ({"bearer_token": "gate-token", "url_username": "gate"}, "mutually exclusive"),
    ({"url_password": "gate-password"}, "url_username"),
    ({"timeout": 0}, "timeout must be at least 1 second"),
])
def test_conflicting_credentials_and_a_zero_timeout_fail_before_any_request(prometheus, capsys, args, message):
    rc, result = run_module(capsys, **dict({"url": prometheus.url, "queries": [TEMPERATURE]}, **args))
    assert rc == 1 and message in result["msg"]
    assert prometheus.requests == []


@pytest.mark.parametrize("args, message", [
    ({"queries": [TEMPERATURE, TEMPERATURE]}, "name 'gpu temperature' is used twice"),
    ({"queries": [dict(TEMPERATURE, name="")]}, "queries[0]: name must not be empty"),
    ({"queries": []}, "nothing to check: give queries, firing_alerts or both"),
    ({"firing_alerts": {"matchers": ["severity=critical"]}}, "firing_alerts.matchers: matcher 'severity=critical'"),
    ({"queries": [TEMPERATURE], "interval": 0}, "interval must be at least 1 second"),
    ({"queries": [TEMPERATURE], "duration": -5}, "duration must be 0 or more seconds"),
    ({"queries": [TEMPERATURE], "url": "prometheus:9090"}, "url must start with http:// or https://"),
])
def test_bad_options_fail_before_any_request(prometheus, capsys, args, message):
    rc, result = run_module(capsys, **dict({"url": prometheus.url}, **args))
    assert rc == 1
    assert result["msg"].startswith("invalid options: ") and message in result["msg"]
    assert prometheus.requests == []


def test_unknown_operator_is_refused_by_the_argument_spec(prometheus, capsys):
    rc, result = run_module(capsys, url=prometheus.url, queries=[dict(TEMPERATURE, op="=>")])
    assert rc == 1 and "op" in result["msg"] and prometheus.requests == []


def test_malformed_threshold_is_refused_by_the_argument_spec(prometheus, capsys):
    rc, result = run_module(capsys, url=prometheus.url, queries=[dict(TEMPERATURE, threshold="85C")])
    assert rc == 1 and "threshold" in result["msg"] and "float" in result["msg"]
    assert prometheus.requests == []
