"""The audited entry point over the fleet twin: the real `gpuops` command (runner/), through ansible-runner, the
real gpuops.nvidia.audit callback and the diagnose runbook over SSH on three node twins (one with a GPU off the
bus). Then the trail is verified, tampered with in every way, the report opened in a headless browser, and every
file a run leaves is searched for planted secrets.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import yaml

from conftest import start_lab, stop_lab
from gpuops_cli import RUNNER_SRC, collection_path, gpuops, records

pytest.importorskip("ansible_runner")

DRIVER = "550.54.15"
HMAC_KEY = "test-hmac-" + secrets.token_hex(8)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def run_ids(path) -> list:
    ids = []
    for record in records(path):
        if record["run_id"] not in ids:
            ids.append(record["run_id"])
    return ids


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    state_dir = str(tmp_path_factory.mktemp("audit") / "state")
    lab = start_lab(state_dir, "--nodes", "3", "--driver", DRIVER, "--boot-delay", "0.3")
    try:
        lab.gpulab("fault", "gpu-node-03", "xid:79")
        yield lab
    finally:
        stop_lab(lab)


@pytest.fixture(scope="module")
def syslog_socket(tmp_path_factory):
    """A syslog socket (as /dev/log is) and the datagrams it received, drained by a thread as syslogd would."""
    path = str(tmp_path_factory.mktemp("syslog") / "log.sock")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(0.2)
    received, stop = [], threading.Event()

    def drain():
        while not stop.is_set():
            try:
                received.append(receiver.recv(65536).decode("utf-8", "replace"))
            except socket.timeout:
                continue

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    yield path, received
    stop.set()
    reader.join(5)
    receiver.close()


@pytest.fixture(scope="module")
def runs(fleet, tmp_path_factory, syslog_socket):
    """Four runs into one data dir: a dry run with the fail-on gate (node 03 fails it), an apply without ticket,
    an apply with a wrong confirmation, an apply with ticket and confirmation behind sudo."""
    data_dir = str(tmp_path_factory.mktemp("gpuops-data"))
    inventory = os.path.join(fleet.state_dir, "inventory.yml")
    env = {"GPUOPS_AUDIT_HMAC_KEY": HMAC_KEY, "SUDO_USER": "alice", "SUDO_UID": "1001",
           "GPUOPS_AUDIT_SYSLOG": "true", "GPUOPS_AUDIT_SYSLOG_ADDRESS": syslog_socket[0]}
    common = ("-i", inventory, "--data-dir", data_dir)
    started = time.monotonic()
    done = {
        "dry": gpuops("diagnose", *common, "-e", "gpuops_diagnose_fail_on=critical", "--ticket", "CHG-100", env=env),
        "no_ticket": gpuops("diagnose", *common, "--apply", env=env),
        "wrong_cluster": gpuops("diagnose", *common, "--apply", "--ticket", "CHG-101", "--confirm", "gpu-prod-1",
                                env=env),
        "apply": gpuops("diagnose", *common, "--apply", "--ticket", "CHG-102", "--confirm", "gpulab", env=env),
    }
    print("four gpuops runs: %.1f s" % (time.monotonic() - started))
    audit_log = os.path.join(data_dir, "audit.jsonl")
    ids = run_ids(audit_log)
    assert len(ids) == 4, [result.stdout + result.stderr for result in done.values()]
    return {"data_dir": data_dir, "audit_log": audit_log, "inventory": inventory, "results": done,
            "ids": dict(zip(done, ids))}


def run_records(runs, name) -> list:
    return [record for record in records(runs["audit_log"]) if record["run_id"] == runs["ids"][name]]


def test_exit_codes_tell_gate_failed_refused_and_done(runs):
    codes = {name: result.returncode for name, result in runs["results"].items()}
    assert codes == {"dry": 4, "no_ticket": 3, "wrong_cluster": 3, "apply": 0}, {
        name: result.stdout + result.stderr for name, result in runs["results"].items()}


def test_one_screen_summary_names_each_node_and_the_failed_gate(runs):
    summary = runs["results"]["dry"].stdout
    assert len(summary.splitlines()) <= 24
    node_03 = next(line for line in summary.splitlines() if line.strip().startswith("gpu-node-03"))
    assert "failed" in node_03 and "gate diagnosis_clean" in node_03 and "xid_79" in node_03
    assert "exit 4 (gate failed)" in summary and "gates: 2 passed, 1 failed" in summary
    assert "REFUSED: --apply needs --ticket" in runs["results"]["no_ticket"].stdout
    assert "does not match the inventory's cluster 'gpulab'" in runs["results"]["wrong_cluster"].stdout


def test_run_start_records_who_what_and_the_input_digests(runs):
    start = next(record for record in run_records(runs, "apply") if record["event"] == "run_start")
    assert start["operator"]["sudo_user"] == "alice" and start["operator"]["sudo_uid"] == 1001
    assert start["operator"]["user"] == "root"
    assert start["ticket"] == "CHG-102" and start["mode"] == "apply"
    assert start["collection"]["name"] == "gpuops.nvidia" and start["collection"]["version"]
    with open(runs["inventory"], "rb") as stream:
        assert start["inventory"]["sha256"] == hashlib.sha256(stream.read() + b"\0").hexdigest()
    dry_start = next(record for record in run_records(runs, "dry") if record["event"] == "run_start")
    assert dry_start["mode"] == "check" and dry_start["extra_vars"]["names"] == ["gpuops_diagnose_fail_on"]
    assert dry_start["extra_vars"]["sha256"] and dry_start["ticket"] == "CHG-100"


def test_every_node_step_and_gate_is_recorded_with_result_and_duration(runs):
    dry = run_records(runs, "dry")
    steps = [record for record in dry if record["event"] in ("task", "gate")]
    assert {(step["host"], step["task"]) for step in steps} >= {
        ("gpu-node-0%d" % node, "Gather the NVIDIA driver facts") for node in (1, 2, 3)}
    assert all(step["duration_s"] is not None and step["duration_s"] >= 0 for step in steps)
    gates = {step["host"]: step for step in steps if step["event"] == "gate"}
    assert {host: gate["passed"] for host, gate in gates.items()} == {
        "gpu-node-01": True, "gpu-node-02": True, "gpu-node-03": False}
    assert "xid_79" in gates["gpu-node-03"]["msg"] and gates["gpu-node-03"]["gate"] == "diagnosis_clean"
    events = [record["event"] for record in dry]
    assert events[:3] == ["runner_start", "run_start", "batch_start"] and events[-2:] == ["run_end", "runner_end"]
    assert dry[-1]["exit_code"] == 4 and dry[-2]["hosts"]["gpu-node-03"]["failures"] == 1


def test_refused_apply_runs_nothing_but_leaves_its_record_and_report(runs):
    refused = run_records(runs, "no_ticket")
    assert [record["event"] for record in refused] == ["refused"]
    assert refused[0]["exit_code"] == 3 and refused[0]["operator"]["sudo_user"] == "alice"
    run_dir = os.path.join(runs["data_dir"], "runs", runs["ids"]["no_ticket"])
    assert not os.path.exists(os.path.join(run_dir, "artifacts"))
    with open(os.path.join(run_dir, "report.html")) as stream:
        assert "refused" in stream.read()


def test_the_trail_verifies_with_and_without_the_hmac_key(runs):
    keyed = gpuops("audit", "verify", runs["audit_log"], env={"GPUOPS_AUDIT_HMAC_KEY": HMAC_KEY})
    assert keyed.returncode == 0 and "intact" in keyed.stdout and "HMAC checked" in keyed.stdout
    plain = gpuops("audit", "verify", runs["audit_log"], env={"GPUOPS_AUDIT_HMAC_KEY": ""})
    assert plain.returncode == 0 and "no HMAC key given" in plain.stdout
    wrong = gpuops("audit", "verify", runs["audit_log"], env={"GPUOPS_AUDIT_HMAC_KEY": "not-the-key"})
    assert wrong.returncode == 3 and "KEY PROBLEM: wrong key" in wrong.stdout and "TAMPERED" not in wrong.stdout


def tampered_copy(runs, tmp_path, change) -> str:
    with open(runs["audit_log"]) as stream:
        lines = stream.read().splitlines()
    change(lines)
    path = str(tmp_path / "tampered.jsonl")
    with open(path, "w") as stream:
        stream.write("\n".join(lines) + "\n")
    return path


def edit_gate_verdict(lines):
    number = next(index for index, line in enumerate(lines) if '"passed":false' in line)
    lines[number] = lines[number].replace('"passed":false', '"passed":true')
    return number + 1


@pytest.mark.parametrize("name, change, first_bad", [
    ("edited", lambda lines: lines.__setitem__(4, lines[4].replace("gpu-node-0", "gpu-node-9")), 6),
    ("removed", lambda lines: lines.pop(4), 5),
    ("inserted", lambda lines: lines.insert(3, lines[2]), 4),
    ("reordered", lambda lines: lines.insert(6, lines.pop(5)), 6),
])
def test_tampering_is_detected_and_the_first_bad_line_named(runs, tmp_path, name, change, first_bad):
    verdict = gpuops("audit", "verify", tampered_copy(runs, tmp_path, change), env={"GPUOPS_AUDIT_HMAC_KEY": ""})
    assert verdict.returncode == 1, name
    assert "TAMPERED at line %d:" % first_bad in verdict.stdout, (name, verdict.stdout)


def test_a_flipped_gate_verdict_is_caught_by_the_hmac_on_its_own_line(runs, tmp_path):
    edited_at = []
    path = tampered_copy(runs, tmp_path, lambda lines: edited_at.append(edit_gate_verdict(lines)))
    verdict = gpuops("audit", "verify", path, env={"GPUOPS_AUDIT_HMAC_KEY": HMAC_KEY})
    assert verdict.returncode == 1 and "TAMPERED at line %d: hmac does not match" % edited_at[0] in verdict.stdout


def test_syslog_received_every_line_the_callback_and_the_runner_wrote(runs, syslog_socket):
    time.sleep(0.5)
    received = list(syslog_socket[1])
    lines = open(runs["audit_log"]).read().splitlines()
    assert len(received) == len(lines)
    assert all(message.endswith("gpuops-audit: " + line) for line, message in zip(lines, received))
    assert all(record.get("syslog_dropped") == 0 for record in records(runs["audit_log"])
               if record["event"] == "run_end")


def test_a_stalled_syslog_socket_never_blocks_the_run(fleet, tmp_path):
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # bound, never read, filled up before the run
    stalled.bind(str(tmp_path / "stalled.sock"))
    filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    filler.setblocking(False)
    try:
        while True:
            filler.sendto(b"<14>filler: x", str(tmp_path / "stalled.sock"))
    except BlockingIOError:
        filler.close()
    try:
        done = gpuops("diagnose", "-i", os.path.join(fleet.state_dir, "inventory.yml"), "--data-dir",
                      str(tmp_path / "data"), env={"GPUOPS_AUDIT_SYSLOG": "true",
                                                   "GPUOPS_AUDIT_SYSLOG_ADDRESS": str(tmp_path / "stalled.sock")},
                      timeout=120)
    finally:
        stalled.close()
    assert done.returncode == 0, done.stdout + done.stderr
    trail = records(str(tmp_path / "data" / "audit.jsonl"))
    end = next(record for record in trail if record["event"] == "run_end")
    # the callback's own lines before run_end (the runner_start line is the runner's)
    assert end["syslog_dropped"] == trail.index(end) - 1 and end["syslog_dropped"] >= 10


def test_report_and_timeline_sit_next_to_the_artifacts(runs):
    run_dir = os.path.join(runs["data_dir"], "runs", runs["ids"]["dry"])
    assert sorted(os.listdir(run_dir)) == ["artifacts", "audit-head", "report.html", "summary.txt", "timeline.svg"]
    with open(os.path.join(run_dir, "timeline.svg")) as stream:
        picture = stream.read()
    assert all("gpu-node-0%d" % node in picture for node in (1, 2, 3))
    assert picture.count('class="gate failed"') == 1 and picture.count('class="gate passed"') == 2
    assert "batch 1" in picture
    with open(os.path.join(run_dir, "artifacts", runs["ids"]["dry"], "status")) as stream:
        assert stream.read() == "failed"


def chromium_binary():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(*args, timeout=90) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="gpuops-chromium-")
    try:
        return subprocess.run([chromium_binary()] + CHROMIUM_FLAGS + ["--user-data-dir=" + profile] + list(args),
                              capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_timeline_and_report_render_in_a_headless_browser(runs, tmp_path):
    if chromium_binary() is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the report is not rendered")
    run_dir = os.path.join(runs["data_dir"], "runs", runs["ids"]["dry"])
    svg_dom = chromium("--dump-dom", "file://" + os.path.join(run_dir, "timeline.svg")).stdout
    assert "parsererror" not in svg_dom and "This page contains the following errors" not in svg_dom
    assert svg_dom.count('class="step') >= 6 and "gpu-node-03" in svg_dom
    page_dom = chromium("--dump-dom", "file://" + os.path.join(run_dir, "report.html")).stdout
    assert '<svg id="timeline"' in page_dom and page_dom.count("<tr class=") == 3
    assert "<tr class=\"failed\">" in page_dom
    screenshot = str(tmp_path / "report.png")
    chromium("--window-size=1100,900", "--screenshot=" + screenshot, "file://" + os.path.join(run_dir, "report.html"))
    with open(screenshot, "rb") as stream:
        png = stream.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000


def test_a_runbook_not_in_the_collection_is_refused_by_name(fleet, tmp_path):
    if os.path.exists(os.path.join(collection_path(), "ansible_collections", "gpuops", "nvidia", "playbooks",
                                   "driver_upgrade.yml")):
        pytest.skip("driver_upgrade.yml has landed: plan runs it")
    done = gpuops("plan", "-i", os.path.join(fleet.state_dir, "inventory.yml"), "--data-dir", str(tmp_path))
    assert done.returncode == 3 and "gpuops.nvidia.driver_upgrade is not in the collection" in done.stdout
    refused = records(os.path.join(str(tmp_path), "audit.jsonl"))[0]
    assert refused["event"] == "refused" and refused["collection"]["name"] == "gpuops.nvidia"


def test_run_folders_are_rotated(fleet, tmp_path):
    data_dir = str(tmp_path / "data")
    inventory = os.path.join(fleet.state_dir, "inventory.yml")
    for _ in range(3):
        refused = gpuops("diagnose", "-i", inventory, "--data-dir", data_dir, "--apply", "--keep-runs", "2")
        assert refused.returncode == 3
    kept = sorted(os.listdir(os.path.join(data_dir, "runs")))
    assert len(kept) == 2 and kept == run_ids(os.path.join(data_dir, "audit.jsonl"))[1:]


def test_interrupted_run_exits_6_and_is_recorded(fleet, tmp_path):
    data_dir = str(tmp_path / "data")
    audit_log = os.path.join(data_dir, "audit.jsonl")
    env = dict(os.environ, PYTHONPATH=RUNNER_SRC, ANSIBLE_COLLECTIONS_PATH=collection_path(),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    process = subprocess.Popen([sys.executable, "-m", "gpuops_runner", "diagnose", "-i",
                                os.path.join(fleet.state_dir, "inventory.yml"), "--data-dir", data_dir],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (os.path.exists(audit_log) and any(
            record["event"] == "batch_start" for record in records(audit_log))):
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 6, output
    end = records(audit_log)[-1]
    assert end["event"] == "runner_end" and end["outcome"] == "interrupted"
    assert gpuops("audit", "verify", audit_log).returncode == 0


# ---- secrets -------------------------------------------------------------------------------------------------

SECRET_PLAY = """
- name: Handle the planted secrets
  hosts: gpu_nodes
  gather_facts: false
  vars:
    planted_no_log_value: "%(no_log_value)s"
  tasks:
    - name: Use the vaulted MOK password
      ansible.builtin.command: /bin/echo {{ gpuops_mok_password }}
      no_log: true
      changed_when: false
    - name: Use the API token from the environment
      ansible.builtin.command: /bin/echo {{ lookup('ansible.builtin.env', 'GPUOPS_TEST_API_TOKEN') }}
      no_log: true
      changed_when: false
    - name: Print a no_log value
      ansible.builtin.debug:
        msg: "{{ planted_no_log_value }}"
      no_log: true
    - name: Fail with the MOK password in the message
      ansible.builtin.fail:
        msg: "wrong MOK password {{ gpuops_mok_password }}"
      no_log: true
      ignore_errors: true
"""


def files_under(*roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
        for folder, _, names in os.walk(root):
            for name in names:
                yield os.path.join(folder, name)


def kubeconfig_token(lab) -> str:
    with open(os.path.join(lab.state_dir, "kubeconfig")) as stream:
        config = yaml.safe_load(stream)
    return config["users"][0]["user"]["token"]


def test_planted_secrets_appear_in_no_file_the_run_leaves(fleet, tmp_path):
    planted = {"mok_password": "mokpw-" + secrets.token_hex(12), "api_token": "tok-" + secrets.token_hex(12),
               # the twin's real API token: the diagnose runbook reads the cluster with it (a made-up one fails it)
               "k8s_key": kubeconfig_token(fleet), "hmac_key": "hmac-" + secrets.token_hex(12),
               "vault_password": "vaultpw-" + secrets.token_hex(12), "no_log_value": "nolog-" + secrets.token_hex(12),
               "cli_token": "cli-" + secrets.token_hex(12)}
    # a collection copy whose diagnose runbook also handles the secrets
    collections = tmp_path / "collections"
    source = os.path.join(collection_path(), "ansible_collections", "gpuops", "nvidia")
    shutil.copytree(source, str(collections / "ansible_collections" / "gpuops" / "nvidia"),
                    ignore=shutil.ignore_patterns("tests", ".git"))
    with open(collections / "ansible_collections" / "gpuops" / "nvidia" / "playbooks" / "diagnose.yml", "a") as stream:
        stream.write(SECRET_PLAY % planted)
    # an inventory whose group_vars hold the vault-encrypted MOK password; the vault password file lies outside
    vault_password_file = tmp_path / "vault-pass"
    vault_password_file.write_text(planted["vault_password"])
    encrypted = subprocess.run(
        ["ansible-vault", "encrypt_string", "--vault-password-file", str(vault_password_file),
         "--name", "gpuops_mok_password", planted["mok_password"]],
        capture_output=True, text=True, check=True,
        env=dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))).stdout
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    shutil.copy(os.path.join(fleet.state_dir, "inventory.yml"), str(inventory / "hosts.yml"))
    (inventory / "group_vars" / "gpu_nodes.yml").write_text("---\n" + encrypted)
    data_dir = str(tmp_path / "data")
    env = {"GPUOPS_TEST_API_TOKEN": planted["api_token"], "K8S_AUTH_API_KEY": planted["k8s_key"],
           "GPUOPS_AUDIT_HMAC_KEY": planted["hmac_key"]}
    common = ("-i", str(inventory), "--data-dir", data_dir, "--vault-password-file", str(vault_password_file))
    done = gpuops("diagnose", *common, "--apply", "--ticket", "SEC-1", "--confirm", "gpulab", env=env,
                  collections=str(collections))
    refused = gpuops("diagnose", *common, "-e", "api_token=" + planted["cli_token"], env=env,
                     collections=str(collections))
    assert done.returncode == 0, done.stdout + done.stderr
    assert refused.returncode == 3 and "looks like a secret" in refused.stdout
    # the secrets were really used: the tasks ran and succeeded (decrypted vault value, env token present)
    trail = records(os.path.join(data_dir, "audit.jsonl"))
    used = {record["task"]: record["status"] for record in trail if record.get("host") == "gpu-node-01"}
    assert used["Use the vaulted MOK password"] == "ok" and used["Use the API token from the environment"] == "ok"
    failed = next(record for record in trail if record.get("task") == "Fail with the MOK password in the message")
    assert failed["msg"] == "censored (no_log)" and failed["ignored"] is True
    leaks = []
    for path in files_under(data_dir):
        with open(path, "rb") as stream:
            content = stream.read()
        leaks += ["%s in %s" % (name, os.path.relpath(path, data_dir)) for name, value in planted.items()
                  if value.encode() in content]
    assert leaks == []
    printed = done.stdout + done.stderr + refused.stdout + refused.stderr
    assert [name for name, value in planted.items() if value in printed] == []
