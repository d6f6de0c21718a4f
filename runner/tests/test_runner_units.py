"""The runner's pure parts: refusals, outcome -> exit code, event censoring, artifacts, the report and timeline."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from xml.etree import ElementTree

import pytest

from gpuops_runner import collection, exitcodes, extravars, report, runbook, timeline
from gpuops_runner.cli import build_parser, main

RUNNER_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def record(event, **fields):
    base = {"event": event, "run_id": "r1", "ts": "2026-12-03T03:00:00.000Z"}
    base.update(fields)
    return base


def step(host, task, status, started, ended, batch=1, **fields):
    return record("task", host=host, task=task, status=status, started=started, ts=ended, batch=batch,
                  duration_s=1.0, **fields)


UPGRADE = [
    record("run_start", ticket="CHG-1", operator={"user": "root", "host": "bastion", "sudo_user": "alice"},
           collection={"name": "gpuops.nvidia", "version": "0.1.0", "git_commit": "abcdef1234567890"}),
    step("gpu-node-01", "Drain", "changed", "2026-12-03T03:00:00.000Z", "2026-12-03T03:00:10.000Z", step="drain"),
    step("gpu-node-01", "Install", "changed", "2026-12-03T03:00:10.000Z", "2026-12-03T03:00:40.000Z", step="install"),
    record("gate", host="gpu-node-01", task="GPUs allocatable", gate="gpu_allocatable", passed=True, status="ok",
           started="2026-12-03T03:00:40.000Z", ts="2026-12-03T03:00:45.000Z", batch=1, duration_s=5.0),
    step("gpu-node-02", "Drain", "changed", "2026-12-03T03:00:50.000Z", "2026-12-03T03:01:00.000Z", batch=2,
         step="drain"),
    step("gpu-node-02", "Reboot", "failed", "2026-12-03T03:01:00.000Z", "2026-12-03T03:01:30.000Z", batch=2,
         step="reboot", msg="timed out waiting for the node"),
    step("gpu-node-03", "Drain", "unreachable", "2026-12-03T03:00:50.000Z", "2026-12-03T03:00:51.000Z", batch=2,
         msg="ssh: connect timed out"),
    record("runner_end", exit_code=5, outcome="node failed", runner_status="failed", runbook="upgrade",
           mode="apply", cluster="gpu-prod-1"),
]


def parse(arguments, events):
    return extravars.parse(arguments, events.is_secret_name)


def test_secret_looking_extra_vars_and_malformed_pairs_are_refused(events):
    assert parse(["a=1", "b=x=y"], events) == {"a": "1", "b": "x=y"}
    with pytest.raises(extravars.ExtraVarsRefused, match="looks like a secret"):
        parse(["gpuops_mok_password=x"], events)
    with pytest.raises(extravars.ExtraVarsRefused, match="not KEY=VALUE"):
        parse(["novalue"], events)


def test_extra_vars_read_as_ansible_playbook_reads_them(events, tmp_path):
    listed = tmp_path / "vars.yml"
    listed.write_text("gpuops_upgrade_batches: [1, 1]\ngpuops_soak_seconds: 0\n")
    parsed = parse(["a=1", '{"gpuops_reboot_timeout": 120, "b": true}', "@%s" % listed, "a=2"], events)
    assert parsed == {"a": "2", "gpuops_reboot_timeout": 120, "b": True, "gpuops_upgrade_batches": [1, 1],
                      "gpuops_soak_seconds": 0}
    with pytest.raises(extravars.ExtraVarsRefused, match="looks like a secret"):
        parse(['{"api_token": "x"}'], events)
    (tmp_path / "list.yml").write_text("[1]\n")
    with pytest.raises(extravars.ExtraVarsRefused, match="not a mapping"):
        parse(["@%s" % (tmp_path / "list.yml")], events)
    with pytest.raises(extravars.ExtraVarsRefused, match="cannot read"):
        parse(["@%s" % (tmp_path / "missing.yml")], events)
    with pytest.raises(extravars.ExtraVarsRefused, match="not valid JSON/YAML"):
        parse(['{"a": [1'], events)


def test_confirmation_must_match_and_needs_a_terminal_or_confirm():
    runbook.confirm_cluster("gpu-prod-1", "gpu-prod-1", None)
    with pytest.raises(runbook.Refused, match="does not match"):
        runbook.confirm_cluster("gpu-prod-1", "gpu-prod-2", None)
    with pytest.raises(runbook.Refused, match="--confirm gpu-prod-1"):
        runbook.confirm_cluster("gpu-prod-1", None, None)
    runbook.confirm_cluster("gpu-prod-1", None, lambda prompt: "gpu-prod-1\n")


@pytest.mark.parametrize("records, status, rc, interrupted, code", [
    ([], "successful", 0, False, exitcodes.DONE),
    ([], "failed", 2, False, exitcodes.ANSIBLE_ERROR),
    ([], "canceled", 254, False, exitcodes.INTERRUPTED),
    ([], "successful", 0, True, exitcodes.INTERRUPTED),
    ([{"event": "task", "status": "failed"}], "failed", 2, False, exitcodes.NODE_FAILED),
    ([{"event": "task", "status": "unreachable"}], "failed", 4, False, exitcodes.NODE_FAILED),
    ([{"event": "task", "status": "failed", "ignored": True}], "successful", 0, False, exitcodes.DONE),
    ([{"event": "task", "status": "failed"}, {"event": "gate", "status": "failed"}], "failed", 2, False,
     exitcodes.GATE_FAILED),
    ([{"event": "gate", "gate": "inputs", "status": "ok"}, {"event": "gate", "gate": "inputs", "status": "failed"}],
     "failed", 2, False, exitcodes.REFUSED),
    ([{"event": "gate", "gate": "inputs", "status": "ok"}, {"event": "gate", "gate": "batch", "status": "failed"}],
     "failed", 2, False, exitcodes.GATE_FAILED),
])
def test_outcome_maps_to_exit_codes(records, status, rc, interrupted, code):
    assert runbook.outcome_of(records, status, rc, interrupted) == code


def test_exit_codes_are_distinct():
    assert len(set(exitcodes.MEANING)) == len(exitcodes.MEANING) == 8
    assert len({exitcodes.INTACT, exitcodes.TAMPERED, exitcodes.UNREADABLE, exitcodes.KEY_PROBLEM}) == 4


def test_censored_event_loses_its_stdout_and_env_secrets_are_scrubbed():
    event = {"counter": 5, "stdout": "[ERROR]: Task failed: wrong password hunter22",
             "event_data": {"res": {"censored": "hidden"}, "host": "n1"}}
    assert runbook.censor_event(event, set())["stdout"] == runbook.NO_LOG_STDOUT
    leaked = {"counter": 6, "stdout": "token tok-123456 and \"quoted\"", "event_data": {"res": {"msg": "tok-123456"}}}
    cleaned = runbook.censor_event(leaked, {"tok-123456"})
    assert "tok-123456" not in json.dumps(cleaned) and cleaned["event_data"]["res"]["msg"] == "********"


def test_command_artifact_keeps_only_the_values_the_runner_set(tmp_path):
    (tmp_path / "command").write_text(json.dumps({"command": ["ansible-playbook"], "cwd": "/",
                                                  "env": {"GPUOPS_RUN_ID": "r1", "K8S_AUTH_API_KEY": "s3cret"}}))
    runbook.scrub_command_artifact(str(tmp_path), {"GPUOPS_RUN_ID": "r1"})
    data = json.loads((tmp_path / "command").read_text())
    assert data["env"] == {"GPUOPS_RUN_ID": "r1", "K8S_AUTH_API_KEY": "(inherited, not recorded)"}
    assert oct(os.stat(tmp_path / "command").st_mode & 0o777) == "0o600"


def test_rotation_keeps_the_newest_runs(tmp_path):
    for name in ("20261201T000000Z-aaaaaa", "20261202T000000Z-bbbbbb", "20261203T000000Z-cccccc"):
        (tmp_path / name).mkdir()
    runbook.rotate_runs(str(tmp_path), 2)
    assert sorted(os.listdir(tmp_path)) == ["20261202T000000Z-bbbbbb", "20261203T000000Z-cccccc"]


def test_run_ids_sort_by_time():
    import datetime
    early = runbook.new_run_id(datetime.datetime(2026, 12, 3, 1, 0, tzinfo=datetime.timezone.utc))
    late = runbook.new_run_id(datetime.datetime(2026, 12, 3, 2, 0, tzinfo=datetime.timezone.utc))
    assert early < late and early.startswith("20261203T010000.000Z-")
    first = runbook.new_run_id(datetime.datetime(2026, 12, 3, 1, 0, 0, 1000, tzinfo=datetime.timezone.utc))
    second = runbook.new_run_id(datetime.datetime(2026, 12, 3, 1, 0, 0, 2000, tzinfo=datetime.timezone.utc))
    assert first < second      # two runs in the same second still sort by start


def test_node_rows_name_the_first_failure_and_order_by_batch():
    rows = report.node_rows(UPGRADE)
    assert [(row["host"], row["batch"], row["result"]) for row in rows] == [
        ("gpu-node-01", 1, "changed"), ("gpu-node-02", 2, "failed"), ("gpu-node-03", 2, "unreachable")]
    assert rows[0]["gates_passed"] == ["gpu_allocatable"]
    assert rows[1]["first_failure"] == {"task": "Reboot", "gate": None, "msg": "timed out waiting for the node"}
    assert rows[0]["end_s"] - rows[0]["start_s"] == 45.0


def test_summary_fits_one_screen_and_says_why(tmp_path):
    text = report.summary_text(UPGRADE, str(tmp_path), "/var/log/audit.jsonl", "ab" * 32)
    assert len(text.splitlines()) <= 24
    assert "sudo by alice" in text and "gpuops.nvidia 0.1.0 (git abcdef123456)" in text
    assert "Reboot: timed out waiting for the node" in text and "exit 5 (node failed)" in text


def test_timeline_is_valid_svg_with_lanes_failures_gates_and_batches():
    picture = timeline.svg_document(report.steps(UPGRADE))
    root = ElementTree.fromstring(picture.split("\n", 1)[1])
    namespace = "{http://www.w3.org/2000/svg}"
    rects = [element for element in root.iter(namespace + "rect") if "step" in element.get("class", "")]
    assert sorted(element.get("class") for element in rects) == [
        "step drain", "step drain", "step install", "step other failed", "step reboot failed"]
    assert [element.get("class") for element in root.iter(namespace + "path") if element.get("class")] == [
        "gate passed"]
    labels = [element.text or "" for element in root.iter(namespace + "text")]
    batch_labels = [label for label in labels if label.startswith("batch")]
    assert batch_labels == ["batch 1", "batch 2"]
    failed_bar = next(element for element in rects if element.get("class") == "step reboot failed")
    assert float(failed_bar.get("width")) > float(next(
        element for element in rects if element.get("class") == "step drain").get("width"))


def test_html_report_escapes_what_it_shows():
    hostile = UPGRADE + [step("<script>alert(1)</script>", "x", "ok", "2026-12-03T03:00:00.000Z",
                              "2026-12-03T03:00:01.000Z")]
    page = report.html_page(hostile, "00" * 32)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_audit_verify_command_names_the_first_bad_line(tmp_path, chain, collections_path, capsys):
    path = str(tmp_path / "audit.jsonl")
    for number in range(4):
        chain.append_record(path, {"event": "task", "n": number})
    assert main(["audit", "verify", path, "--collections-path", collections_path]) == exitcodes.DONE
    lines = open(path).read().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    with open(path, "w") as stream:
        stream.write("\n".join(lines) + "\n")
    assert main(["audit", "verify", path, "--collections-path", collections_path]) == exitcodes.TAMPERED
    assert "TAMPERED at line 2" in capsys.readouterr().out


def test_missing_collection_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(collection, "ansible_search_paths", lambda: [str(tmp_path)])
    assert main(["audit", "verify", "x"]) == exitcodes.USAGE
    assert "gpuops.nvidia (with its audit module_utils) is not installed" in capsys.readouterr().err


def test_plan_has_no_apply_and_each_subcommand_its_own_help(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["plan", "-i", "inv", "--apply"])
    assert exited.value.code == exitcodes.USAGE and "unrecognized arguments: --apply" in capsys.readouterr().err
    assert runbook.RUNBOOKS["plan"][:2] == ("driver_upgrade", False)
    summaries = [entry.summary for entry in runbook.RUNBOOKS.values()]
    assert len(set(summaries)) == len(summaries)


def test_the_confirmation_is_set_by_the_runner_only_for_every_runbook(collections_path, tmp_path):
    for name in ("upgrade", "plan", "bootstrap", "diagnose"):
        args = build_parser().parse_args([name, "-i", "inv", "-e", "gpuops_confirm=gpulab", "--data-dir",
                                          str(tmp_path), "--collections-path", collections_path])
        with pytest.raises(runbook.Refused, match="gpuops_confirm is reserved: gpuops sets it, from --apply"):
            runbook.RunbookRun(args)._check({})


def write_trail(chain, path, count, key=None):
    lines = []
    for number in range(count):
        lines.append(chain.append_record(path, {"event": "task", "n": number}, key))
    return lines


def test_audit_verify_accepts_every_older_genuine_anchor_and_a_syslog_export(
        tmp_path, chain, collections_path, capsys):
    path = str(tmp_path / "audit.jsonl")
    lines = write_trail(chain, path, 5)
    export = tmp_path / "syslog.txt"
    export.write_text("".join("Dec  3 01:00:0%d bastion gpuops-audit: %s\n" % (index, line)
                              for index, line in enumerate(lines)))
    common = ["audit", "verify", path, "--collections-path", collections_path]
    assert main(common + ["--head", chain.line_digest(lines[1])]) == exitcodes.INTACT
    assert main(common + ["--anchors-from", str(export), "--require-anchored-head"]) == exitcodes.INTACT
    assert "5 anchor(s), the newest at line 5" in capsys.readouterr().out
    with open(path, "w") as stream:                         # the tail cut off: no key needed to see it
        stream.write("\n".join(lines[:3]) + "\n")
    assert main(common + ["--anchors-from", str(export)]) == exitcodes.TAMPERED
    assert "is the head of no prefix of the trail" in capsys.readouterr().out


def test_audit_verify_names_a_wrong_key_and_unsigned_lines_as_key_problems(
        tmp_path, chain, collections_path, capsys, monkeypatch):
    path = str(tmp_path / "audit.jsonl")
    write_trail(chain, path, 2, b"the-key")
    write_trail(chain, path, 2)
    write_trail(chain, path, 2, b"the-key")
    common = ["audit", "verify", path, "--collections-path", collections_path]
    monkeypatch.setenv("GPUOPS_AUDIT_HMAC_KEY", "not-the-key")
    assert main(common) == exitcodes.KEY_PROBLEM
    assert "KEY PROBLEM: wrong key" in capsys.readouterr().out
    monkeypatch.setenv("GPUOPS_AUDIT_HMAC_KEY", "the-key")
    assert main(common) == exitcodes.KEY_PROBLEM
    assert "lines 3-4 unsigned" in capsys.readouterr().out
    assert main(common + ["--allow-unsigned"]) == exitcodes.INTACT
    assert "accepted without a signature" in capsys.readouterr().out


def test_audit_verify_of_an_unreadable_file_is_exit_2_on_stderr(tmp_path, collections_path, capsys):
    assert main(["audit", "verify", str(tmp_path), "--collections-path", collections_path]) == exitcodes.UNREADABLE
    captured = capsys.readouterr()
    assert captured.out == "" and "cannot be read" in captured.err


def test_the_collection_is_found_where_ansible_cfg_points(tmp_path, collections_path, monkeypatch):
    (tmp_path / "ansible.cfg").write_text("[defaults]\ncollections_path = %s\n" % collections_path)
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    env.pop("ANSIBLE_COLLECTIONS_PATHS", None)
    done = subprocess.run([sys.executable, "-c", "from gpuops_runner import collection; "
                                                 "print(collection.find_collections_path())"],
                          capture_output=True, text=True, env=dict(env, PYTHONPATH=RUNNER_SRC), cwd=str(tmp_path),
                          check=False)
    assert done.stdout.strip() == collections_path, done.stderr


def test_playbook_arguments_are_a_list_quoted_for_ansible_runner(tmp_path, collections_path):
    vault = tmp_path / "a folder with spaces" / "vault pass"
    vault.parent.mkdir()
    vault.write_text("x")
    args = build_parser().parse_args(["diagnose", "-i", "inv", "--diff", "--vault-password-file", str(vault),
                                      "--data-dir", str(tmp_path / "data"), "--collections-path", collections_path])
    arguments = runbook.RunbookRun(args)._playbook_arguments()
    assert arguments == ["--check", "--diff", "--vault-password-file", str(vault)]
    assert shlex.split(shlex.join(arguments)) == arguments


def test_inventory_sources_ansible_accepts_are_read_with_ansible_runner(tmp_path, monkeypatch):
    from gpuops_runner import inventory
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    listing = inventory.read_inventory("gpu-a,gpu-b,", dict(os.environ))
    assert inventory.nodes(listing) == ["gpu-a", "gpu-b"]
    with pytest.raises(inventory.InventoryError, match="missing on gpu-a, gpu-b"):
        inventory.the_cluster(listing)
    script = tmp_path / "inventory.sh"
    script.write_text("#!/bin/sh\necho '{\"gpu_nodes\": {\"hosts\": [\"n1\"], \"vars\": "
                      "{\"gpuops_cluster_name\": \"lab\"}}, \"_meta\": {\"hostvars\": {}}}'\n")
    script.chmod(0o755)
    assert inventory.the_cluster(inventory.read_inventory(str(script), dict(os.environ))) == "lab"
