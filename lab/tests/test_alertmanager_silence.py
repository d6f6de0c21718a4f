"""alertmanager_silence against a real Alertmanager (Debian's prometheus-alertmanager) on loopback: the module
alone (create, reuse, alerts muted and only the node's, expire, check mode, unreachable, bad matchers), then the
driver upgrade runbook on a two-node twin, judged from what Alertmanager kept (expired silences with their start
and end times), the nodes' boots and records, and real alerts a real Prometheus fired into it during the run.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import pytest
import yaml

from alertmanager_harness import ALERTMANAGER, AlertmanagerServer
from conftest import collections_path, lab_env, start_lab, stop_lab

pytestmark = [
    pytest.mark.skipif(collections_path() is None, reason="the collection tree is not built (make tree)"),
    pytest.mark.skipif(ALERTMANAGER is None, reason="prometheus-alertmanager is not installed"),
]

RUN = "20261203T020000Z-1a2b"
OLD, NEW = "595.91.07", "615.71.09"


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory):
    server = AlertmanagerServer(str(tmp_path_factory.mktemp("alertmanager"))).start()
    yield server
    server.stop()


def run_module(args: dict, check_mode=False):
    """(rc, the module's result) of gpuops.nvidia.alertmanager_silence run by ansible on localhost."""
    argv = ["ansible", "localhost", "-m", "gpuops.nvidia.alertmanager_silence", "-a", json.dumps(args)]
    if check_mode:
        argv.append("--check")
    env = dict(lab_env(), ANSIBLE_COLLECTIONS_PATH=collections_path(), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_LOCALHOST_WARNING="false")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    try:
        result = json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        raise AssertionError("no module result (%d): %s %s" % (done.returncode, done.stdout, done.stderr))
    return done.returncode, result


def live(silences, node=None, run_id=None):
    marker = "[gpuops.nvidia node=%s run=%s]" % (node, run_id) if node else None
    return [silence for silence in silences if silence["status"]["state"] == "active"
            and (marker is None or silence["comment"].endswith(marker))]


def alert(name, **labels):
    return {"labels": dict(labels, alertname=name), "annotations": {}, "generatorURL": "http://prometheus/graph"}


def suppressed_by(alerts, **labels):
    """The silence ids muting the alert with these labels (KeyError if Alertmanager does not hold it)."""
    for one in alerts:
        if all(one["labels"].get(key) == value for key, value in labels.items()):
            return set(one["status"]["silencedBy"])
    raise KeyError(labels)


# --------------------------------------------------------------------------- the module alone


def test_a_node_is_silenced_once_and_only_its_alerts_are_muted_until_the_silences_expire(alertmanager):
    node = "gpu-node-11"
    args = {"url": alertmanager.url, "node": node, "run_id": RUN, "created_by": "alice@bastion/" + RUN,
            "comment": "driver upgrade to " + NEW, "duration": 600}
    rc, created = run_module(args)
    assert rc == 0 and created["changed"] and created["error"] is None
    assert [silence["action"] for silence in created["silences"]] == ["created"] * 3
    held = live(alertmanager.silences(), node, RUN)
    assert sorted(silence["id"] for silence in held) == sorted(created["silence_ids"])
    assert all(silence["createdBy"] == "alice@bastion/" + RUN for silence in held)
    assert all(silence["comment"] == "driver upgrade to %s [gpuops.nvidia node=%s run=%s]" % (NEW, node, RUN)
               for silence in held)

    rc, again = run_module(args)
    assert rc == 0 and not again["changed"]
    assert [silence["action"] for silence in again["silences"]] == ["reused"] * 3
    assert again["silence_ids"] == created["silence_ids"]
    assert len(live(alertmanager.silences(), node, RUN)) == 3

    # the labels node-exporter, dcgm-exporter and kube-state-metrics alerts carry, for this node and another one
    alertmanager.post_alerts([
        alert("NodeFilesystemAlmostOutOfSpace", instance="%s:9100" % node, job="node-exporter"),
        alert("GPUXidError", Hostname=node, gpu="0", job="dcgm-exporter"),
        alert("KubeNodeNotReady", node=node, job="kube-state-metrics"),
        alert("KubeNodeNotReady", node="gpu-node-12", job="kube-state-metrics"),
        alert("GPUXidError", Hostname="gpu-node-12", gpu="0", job="dcgm-exporter"),
    ])
    muted = alertmanager.alerts()
    ids = set(created["silence_ids"])
    assert suppressed_by(muted, instance="%s:9100" % node) & ids
    assert suppressed_by(muted, alertname="GPUXidError", Hostname=node) & ids
    assert suppressed_by(muted, alertname="KubeNodeNotReady", node=node) & ids
    assert suppressed_by(muted, node="gpu-node-12") == set()
    assert suppressed_by(muted, Hostname="gpu-node-12") == set()

    rc, expired = run_module({"url": alertmanager.url, "node": node, "run_id": RUN, "state": "absent"})
    assert rc == 0 and expired["changed"]
    assert sorted(expired["silence_ids"]) == sorted(created["silence_ids"])
    assert live(alertmanager.silences(), node) == []
    kept = {silence["id"]: silence for silence in alertmanager.silences()}
    assert all(kept[silence_id]["status"]["state"] == "expired" for silence_id in created["silence_ids"])
    ringing = alertmanager.alerts()
    assert suppressed_by(ringing, instance="%s:9100" % node) == set()
    assert suppressed_by(ringing, alertname="GPUXidError", Hostname=node) == set()

    rc, nothing_left = run_module({"url": alertmanager.url, "node": node, "run_id": RUN, "state": "absent"})
    assert rc == 0 and not nothing_left["changed"] and nothing_left["silences"] == []


def test_a_batch_of_nodes_is_silenced_in_one_call_each_with_its_matchers_and_expired_in_one(alertmanager):
    nodes = [{"name": "gpu-node-31"}, {"name": "gpu-node-32", "matchers": ['Hostname="gpu-node-32"']},
             {"name": "bad node"}]
    args = {"url": alertmanager.url, "nodes": nodes[:2], "run_id": RUN, "duration": 600}
    rc, created = run_module(args)
    assert rc == 0 and created["changed"] and created["failed_nodes"] == []
    assert [s["action"] for s in created["nodes"]["gpu-node-31"]["silences"]] == ["created"] * 3
    assert [s["action"] for s in created["nodes"]["gpu-node-32"]["silences"]] == ["created"]
    assert len(live(alertmanager.silences(), "gpu-node-31", RUN)) == 3
    assert len(live(alertmanager.silences(), "gpu-node-32", RUN)) == 1

    rc, refused = run_module(dict(args, nodes=nodes))     # a bad name is refused before any request
    assert rc != 0 and "bad node" in refused["msg"]

    rc, expired = run_module({"url": alertmanager.url, "nodes": nodes[:2], "run_id": RUN, "state": "absent"})
    assert rc == 0 and expired["changed"]
    assert live(alertmanager.silences(), "gpu-node-31") == [] and live(alertmanager.silences(), "gpu-node-32") == []


def test_check_mode_reads_alertmanager_and_changes_nothing(alertmanager):
    node = "gpu-node-21"
    before = len(alertmanager.silences())
    rc, would = run_module({"url": alertmanager.url, "node": node, "run_id": RUN}, check_mode=True)
    assert rc == 0 and would["changed"]
    assert [(silence["action"], silence["id"]) for silence in would["silences"]] == [("created", None)] * 3
    assert len(alertmanager.silences()) == before

    rc, created = run_module({"url": alertmanager.url, "node": node, "run_id": RUN})
    rc, would_expire = run_module({"url": alertmanager.url, "node": node, "state": "absent"}, check_mode=True)
    assert rc == 0 and would_expire["changed"]
    assert sorted(would_expire["silence_ids"]) == sorted(created["silence_ids"])
    assert len(live(alertmanager.silences(), node, RUN)) == 3
    run_module({"url": alertmanager.url, "node": node, "state": "absent"})


def test_only_this_nodes_silences_of_this_run_are_expired_and_a_persons_stay(alertmanager):
    run_module({"url": alertmanager.url, "node": "gpu-node-31", "run_id": RUN})
    run_module({"url": alertmanager.url, "node": "gpu-node-31", "run_id": "other-run",
                "matchers": ['node="gpu-node-31"']})
    run_module({"url": alertmanager.url, "node": "gpu-node-32", "run_id": RUN})
    status, _answer = alertmanager.call("POST", "/api/v2/silences", {
        "matchers": [{"name": "node", "value": "gpu-node-31", "isRegex": False, "isEqual": True}],
        "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z", "createdBy": "bob",
        "comment": "fan swap, ticket OPS-1234"})
    assert status == 200

    rc, expired = run_module({"url": alertmanager.url, "node": "gpu-node-31", "run_id": RUN, "state": "absent"})
    assert rc == 0 and len(expired["silence_ids"]) == 3
    left = live(alertmanager.silences())
    assert len(live(left, "gpu-node-31", "other-run")) == 1 and len(live(left, "gpu-node-32", RUN)) == 3
    assert [silence["createdBy"] for silence in left if "gpu-node-31" in json.dumps(silence)].count("bob") == 1

    rc, every_run = run_module({"url": alertmanager.url, "node": "gpu-node-31", "state": "absent"})
    assert rc == 0 and len(every_run["silence_ids"]) == 1
    assert any(silence["createdBy"] == "bob" for silence in live(alertmanager.silences()))
    run_module({"url": alertmanager.url, "node": "gpu-node-32", "state": "absent"})


def test_an_unreachable_alertmanager_fails_closed_or_warns_when_told(alertmanager):
    from gpulab.prometheus import free_port
    closed = "http://127.0.0.1:%d" % free_port()
    rc, failed = run_module({"url": closed, "node": "gpu-node-41", "run_id": RUN})
    assert rc != 0 and failed.get("failed")
    assert "silencing node gpu-node-41: cannot reach Alertmanager at %s" % closed in failed["msg"]
    assert "Connection refused" in failed["msg"]

    rc, warned = run_module({"url": closed, "node": "gpu-node-41", "run_id": RUN, "fail_closed": False})
    assert rc == 0 and not warned.get("failed") and not warned["changed"]
    assert "cannot reach Alertmanager" in warned["error"]
    assert any("cannot reach Alertmanager" in warning for warning in warned["warnings"])

    rc, expiry = run_module({"url": closed, "node": "gpu-node-41", "state": "absent", "fail_closed": False})
    assert rc == 0 and "expiring the silences of node gpu-node-41" in expiry["error"]


def test_bad_options_are_refused_before_any_request(alertmanager):
    before = len(alertmanager.silences())
    rc, refused = run_module({"url": alertmanager.url, "node": "gpu-node-51", "run_id": "two words",
                              "matchers": ['node=~".*"', 'Hostname=gpu-node-51'], "duration": 0})
    assert rc != 0
    for expected in ("run_id must be non-empty, without spaces or brackets",
                     "matchers[0]: every matcher matches an empty label",
                     "matchers[1]: matcher 'Hostname=gpu-node-51' is not",
                     "duration must be at least 1 second"):
        assert expected in refused["msg"]
    assert len(alertmanager.silences()) == before


# --------------------------------------------------------------------------- the runbook on the twin

RULES = """groups:
  - name: gpuops-silence-test
    rules:
      # what a planned reboot makes ring: the node's GPU telemetry is gone while its driver is swapped and it reboots
      - alert: GPUTelemetryMissing
        expr: count by (node) (up{job="dcgm-exporter"}) unless on (node) count by (node) (DCGM_FI_DEV_GPU_TEMP)
      # always firing per node: shows whose alerts are muted when
      - alert: GPUNodeWatchdog
        expr: count by (node, Hostname) (DCGM_FI_DEV_GPU_TEMP) > 0
"""


class AlertLog(threading.Thread):
    """Polls Alertmanager's alerts while the runbook runs: [(time, {(alertname, node): set of silence ids})]."""

    def __init__(self, alertmanager):
        super().__init__(daemon=True)
        self.alertmanager = alertmanager
        self.samples = []
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                alerts = self.alertmanager.alerts()
            except (AssertionError, OSError):
                alerts = []
            self.samples.append((time.time(), {
                (one["labels"]["alertname"], one["labels"].get("node")): set(one["status"]["silencedBy"])
                for one in alerts}))
            self.done.wait(0.3)


def start_prometheus(lab, alertmanager, work_dir):
    """A real Prometheus scraping the twin (its own scrape configuration) and firing RULES into Alertmanager."""
    from gpulab.prometheus import Prometheus, write_config
    with open(lab.info["metrics"]["prometheus_config"]) as stream:
        config = yaml.safe_load(stream)
    os.makedirs(work_dir, exist_ok=True)
    rules_path = os.path.join(work_dir, "rules.yml")
    with open(rules_path, "w") as stream:
        stream.write(RULES)
    config["rule_files"] = [rules_path]
    config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager.url.split("//")[1]]}]}]}
    return Prometheus(write_config(os.path.join(work_dir, "prometheus.yml"), config), work_dir).start()


def wait_for(predicate, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    return False


def rfc3339(text):
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def run_runbook(lab, alertmanager, record_dir, run_id):
    """(rc, output) of the driver upgrade runbook, confirmed, canary then one node, with Alertmanager."""
    extra_vars = {
        "gpuops_driver_version": NEW, "gpuops_confirm": "gpulab", "gpuops_run_id": run_id,
        "gpuops_soak_seconds": 0, "gpuops_upgrade_batches": [1, 1], "gpuops_run_record_dir": record_dir,
        "gpuops_reboot_timeout": 120, "gpuops_ready_timeout": 120, "gpuops_drain_timeout": 60,
        "gpuops_budget_wait_timeout": 0, "precheck_require_kubelet": False,
        "nvidia_driver_runfile_src": os.path.join(lab.state_dir, "runfiles")
        + "/NVIDIA-Linux-x86_64-{{ nvidia_driver_version }}.run",
        "gpuops_alertmanager_url": alertmanager.url,
    }
    done = subprocess.run(["ansible-playbook", "-i", os.path.join(lab.state_dir, "inventory.yml"),
                           "gpuops.nvidia.driver_upgrade", "-e", json.dumps(extra_vars)],
                          capture_output=True, text=True, timeout=900,
                          env=dict(lab.env, ANSIBLE_COLLECTIONS_PATH=collections_path()))
    return done.returncode, done.stdout + done.stderr


def run_record(record_dir, run_id):
    with open(os.path.join(record_dir, "driver-upgrade-%s.json" % run_id)) as stream:
        return json.load(stream)


def test_the_runbook_silences_each_node_for_its_maintenance_only(needs_root, alertmanager, tmp_path):
    lab = start_lab(str(tmp_path / "state"), "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    prometheus = None
    log = AlertLog(alertmanager)
    try:
        prometheus = start_prometheus(lab, alertmanager, str(tmp_path / "prometheus"))
        assert wait_for(lambda: {("GPUNodeWatchdog", "gpu-node-01"), ("GPUNodeWatchdog", "gpu-node-02")}
                        <= {(one["labels"]["alertname"], one["labels"].get("node")) for one in alertmanager.alerts()})
        run_id = "20261203T060000Z-5110"
        since = time.time()
        log.start()
        rc, output = run_runbook(lab, alertmanager, str(tmp_path / "runs"), run_id)
        time.sleep(1)
        log.done.set()
        log.join()
        assert rc == 0, output[-6000:]

        record = run_record(str(tmp_path / "runs"), run_id)
        silences = [silence for silence in alertmanager.silences() if "run=%s]" % run_id in silence["comment"]]
        windows, ids = {}, {}
        for node in ("gpu-node-01", "gpu-node-02"):
            own = [silence for silence in silences if "node=%s " % node in silence["comment"]]
            assert len(own) == 3, own
            assert {silence["matchers"][0]["name"] for silence in own} == {"instance", "Hostname", "node"}
            assert all(silence["status"]["state"] == "expired" for silence in own)
            assert all(silence["createdBy"].endswith("/" + run_id) for silence in own)
            assert all(silence["comment"].startswith("driver upgrade to %s [" % NEW) for silence in own)
            start = max(rfc3339(silence["startsAt"]) for silence in own)
            end = min(rfc3339(silence["endsAt"]) for silence in own)  # expired: the time it was expired
            windows[node] = (start, end)
            ids[node] = {silence["id"] for silence in own}
            steps = record["nodes"][node]["record"]["steps"]
            assert record["nodes"][node]["record"]["state"] == "done"
            # the record's times are whole seconds
            assert start <= rfc3339(steps["draining"]) + 1 and rfc3339(steps["done"]) <= end
            boots = [event["ts"] for event in lab.events(node=node, kind="up", since=since)]
            assert len(boots) == 1 and start < boots[0] < end
        # the canary's maintenance was over (silences expired) before the second node's began
        assert windows["gpu-node-01"][1] < windows["gpu-node-02"][0]

        # what Alertmanager made of the real alerts meanwhile
        seen_missing = 0
        other_loud_while_silenced = {"gpu-node-01": 0, "gpu-node-02": 0}
        for at, alerts in log.samples:
            for node, other in (("gpu-node-01", "gpu-node-02"), ("gpu-node-02", "gpu-node-01")):
                start, end = windows[node]
                if ("GPUTelemetryMissing", node) in alerts:
                    seen_missing += 1
                    # a node's planned-reboot alert is only ever seen muted, by its own silences
                    muted_by = alerts[("GPUTelemetryMissing", node)]
                    assert muted_by and muted_by <= ids[node], (at, node, alerts)
                if start + 0.5 < at < end - 0.5 and alerts.get(("GPUNodeWatchdog", other)) == set():
                    other_loud_while_silenced[node] += 1
        assert seen_missing > 0
        assert all(count > 0 for count in other_loud_while_silenced.values()), other_loud_while_silenced
        assert all(not muted for _at, alerts in log.samples[-1:] for muted in alerts.values())
    finally:
        log.done.set()
        if prometheus is not None:
            prometheus.stop()
        stop_lab(lab)
        shutil.rmtree(str(tmp_path / "state"), ignore_errors=True)


def test_a_failed_canarys_silences_are_expired_so_it_pages_and_the_next_node_is_never_silenced(
        needs_root, alertmanager, tmp_path):
    lab = start_lab(str(tmp_path / "state"), "--nodes", "2", "--driver", OLD, "--runfile", OLD, "--boot-delay", "0.5")
    try:
        lab.gpulab("fault", "gpu-node-01", "dkms-fail")
        run_id = "20261203T061500Z-fa11"
        rc, output = run_runbook(lab, alertmanager, str(tmp_path / "runs"), run_id)
        assert rc != 0 and "stopped after batch 1" in output, output[-6000:]
        record = run_record(str(tmp_path / "runs"), run_id)["nodes"]["gpu-node-01"]["record"]
        assert record["state"] == "failed" and "dkms" in record["reason"]
        silences = [silence for silence in alertmanager.silences() if "run=%s]" % run_id in silence["comment"]]
        assert {"node=gpu-node-01 " in silence["comment"] for silence in silences} == {True}  # none of gpu-node-02
        assert len(silences) == 3 and all(silence["status"]["state"] == "expired" for silence in silences)
        # expired once the node's failure was recorded, not before
        assert rfc3339(record["steps"]["failed"]) <= min(rfc3339(silence["endsAt"]) for silence in silences) + 1
    finally:
        stop_lab(lab)
        shutil.rmtree(str(tmp_path / "state"), ignore_errors=True)
