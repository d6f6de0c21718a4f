"""Bad input never reaches a traceback: each one gets one line on stderr naming the option, its documented exit
code, and changes nothing (usage errors write nothing at all; refusals only their `refused` line)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuops_runner import exitcodes

RUNNER_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
HMAC_KEY = "bad-input-hmac-key-0123456789"


@pytest.fixture
def place(tmp_path, collections_path):
    """A data dir, an inventory of one cluster, and the files and folders the bad inputs point at."""
    (tmp_path / "inventory.yml").write_text("all:\n  vars:\n    gpuops_cluster_name: lab\n  children:\n"
                                            "    gpu_nodes:\n      hosts:\n        n1:\n")
    (tmp_path / "a-file").write_text("x\n")
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "list.yml").write_text("[1, 2]\n")
    (tmp_path / "list-cluster.yml").write_text("gpu_nodes:\n  hosts:\n    n1:\n      gpuops_cluster_name: [lab]\n")
    (tmp_path / "two-clusters.yml").write_text(
        "gpu_nodes:\n  hosts:\n    n1:\n      gpuops_cluster_name: lab\nother:\n  hosts:\n"
        "    x1:\n      gpuops_cluster_name: prod\n")
    return {"dir": tmp_path, "data": tmp_path / "data", "collections": collections_path}


def gpuops(place, *args):
    env = dict(os.environ, PYTHONPATH=RUNNER_SRC, ANSIBLE_COLLECTIONS_PATH=place["collections"],
               GPUOPS_AUDIT_HMAC_KEY=HMAC_KEY,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    argv = [arg.replace("<DIR>", str(place["dir"])) for arg in args]
    return subprocess.run([sys.executable, "-m", "gpuops_runner"] + argv,
                          capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL, check=False,
                          cwd=str(place["dir"]))


BASE = ("-i", "<DIR>/inventory.yml", "--data-dir", "<DIR>/data")
APPLY = BASE + ("--apply", "--ticket", "CHG-1", "--confirm", "lab")

# (name, command line, exit code, what stderr must name)
USAGE_ERRORS = [
    ("data dir is a file", ("diagnose", "-i", "<DIR>/inventory.yml", "--data-dir", "<DIR>/a-file"), "--data-dir"),
    ("data dir under a file", ("diagnose", "-i", "<DIR>/inventory.yml", "--data-dir", "<DIR>/a-file/x"),
     "--data-dir"),
    ("data dir empty", ("diagnose", "-i", "<DIR>/inventory.yml", "--data-dir", ""), "--data-dir"),
    ("data dir templated", ("diagnose", "-i", "<DIR>/inventory.yml", "--data-dir", "<DIR>/{{ x }}"),
     "--data-dir"),
    ("audit log is a directory", ("upgrade",) + APPLY + ("--audit-log", "<DIR>/a-dir"), "--audit-log"),
    ("audit log under a file", ("upgrade",) + APPLY + ("--audit-log", "<DIR>/a-file/audit.jsonl"), "--audit-log"),
    ("audit log in a missing folder", ("upgrade",) + APPLY + ("--audit-log", "<DIR>/missing/audit.jsonl"),
     "--audit-log"),
    ("audit log empty", ("upgrade",) + APPLY + ("--audit-log", ""), "--audit-log"),
    ("audit log templated", ("upgrade",) + APPLY + ("--audit-log", "<DIR>/{% if 1 %}x{% endif %}"), "--audit-log"),
    ("inventory empty", ("diagnose", "-i", "", "--data-dir", "<DIR>/data"), "--inventory"),
    ("inventory templated", ("diagnose", "-i", "{{ lookup('env', 'HOME') }}", "--data-dir", "<DIR>/data"),
     "--inventory"),
    ("ticket templated", ("upgrade",) + BASE + (
        "--apply", "--ticket", "{{ lookup('env', 'GPUOPS_AUDIT_HMAC_KEY') }}", "--confirm", "lab"), "--ticket"),
    ("ticket non-ASCII", ("upgrade",) + BASE + ("--apply", "--ticket", "CHG-\u00e9t\u00e9", "--confirm", "lab"),
     "--ticket"),
    ("ticket with a newline", ("upgrade",) + BASE + ("--apply", "--ticket", "CHG-1\nforged", "--confirm", "lab"),
     "--ticket"),
    ("ticket empty", ("upgrade",) + BASE + ("--apply", "--ticket", " ", "--confirm", "lab"), "--ticket"),
    ("ticket with a space", ("upgrade",) + BASE + ("--apply", "--ticket", "CHG 1", "--confirm", "lab"), "--ticket"),
    ("ticket too long", ("upgrade",) + BASE + ("--apply", "--ticket", "C" * 200, "--confirm", "lab"), "--ticket"),
    ("confirm templated", ("upgrade",) + BASE + ("--apply", "--ticket", "CHG-1", "--confirm", "{{ 'lab' }}"),
     "--confirm"),
    ("confirm non-ASCII", ("upgrade",) + BASE + ("--apply", "--ticket", "CHG-1", "--confirm", "l\u00e4b"), "--confirm"),
    ("confirm empty", ("upgrade",) + BASE + ("--apply", "--ticket", "CHG-1", "--confirm", ""), "--confirm"),
    ("limit templated", ("diagnose",) + BASE + ("--limit", "{{ groups.all }}"), "--limit"),
    ("limit empty", ("diagnose",) + BASE + ("--limit", ""), "--limit"),
    ("vault password file missing", ("diagnose",) + BASE + ("--vault-password-file", "<DIR>/missing"),
     "--vault-password-file"),
    ("vault password file is a directory", ("diagnose",) + BASE + ("--vault-password-file", "<DIR>/a-dir"),
     "--vault-password-file"),
    ("collections path missing", ("diagnose",) + BASE + ("--collections-path", "<DIR>/missing"),
     "--collections-path"),
    ("collections path is a file", ("diagnose",) + BASE + ("--collections-path", "<DIR>/a-file"),
     "--collections-path"),
    ("keep runs zero", ("diagnose",) + BASE + ("--keep-runs", "0"), "--keep-runs"),
    ("keep runs not a number", ("diagnose",) + BASE + ("--keep-runs", "many"), "--keep-runs"),
    ("plan with --apply", ("plan",) + BASE + ("--apply",), "--apply"),
    ("verbose and quiet", ("diagnose",) + BASE + ("-v", "-q"), "--quiet"),
    ("verify an anchor that is not a digest", ("audit", "verify", "<DIR>/a-file", "--anchor", "abc"), "--anchor"),
    ("verify anchors from a missing file", ("audit", "verify", "<DIR>/a-file", "--anchors-from",
                                            "<DIR>/missing"), "--anchors-from"),
]

REFUSALS = [
    ("-e value templated with a lookup of the key", ("diagnose",) + BASE + (
        "-e", "x={{ lookup('env', 'GPUOPS_AUDIT_HMAC_KEY') }}"), "-e x"),
    ("-e nested value templated", ("diagnose",) + BASE + ("-e", '{"x": {"y": ["{% raw %}a{% endraw %}"]}}'), "-e x"),
    ("-e comment template", ("diagnose",) + BASE + ("-e", "x={# hidden #}"), "-e x"),
    ("-e gpuops_ticket", ("upgrade",) + APPLY + ("-e", "gpuops_ticket=OTHER-9"), "-e gpuops_ticket"),
    ("-e gpuops_confirm on plan", ("plan",) + BASE + ("-e", "gpuops_confirm=lab"), "-e gpuops_confirm"),
    ("-e gpuops_run_id", ("diagnose",) + BASE + ("-e", "gpuops_run_id=mine"), "-e gpuops_run_id"),
    ("-e gpuops_cluster_name", ("bootstrap",) + APPLY + ("-e", "gpuops_cluster_name=lab"), "-e gpuops_cluster_name"),
    ("-e ansible_host", ("bootstrap",) + APPLY + ("-e", "ansible_host=10.0.0.9"), "-e ansible_host"),
    ("-e secret name", ("diagnose",) + BASE + ("-e", "api_token=abc123"), "-e api_token"),
    ("-e not a pair", ("diagnose",) + BASE + ("-e", "novalue"), "-e"),
    ("-e a list", ("diagnose",) + BASE + ("-e", "@<DIR>/list.yml"), "-e"),
    ("-e a missing file", ("diagnose",) + BASE + ("-e", "@<DIR>/missing.yml"), "-e"),
    ("-e a directory", ("diagnose",) + BASE + ("-e", "@<DIR>/a-dir"), "-e"),
    ("-e broken JSON", ("diagnose",) + BASE + ("-e", '{"a": [1'), "-e"),
    ("-e non-identifier name", ("diagnose",) + BASE + ("-e", "n\u00e4me-x=1"), "-e"),
    ("apply without ticket", ("upgrade",) + BASE + ("--apply", "--confirm", "lab"), "--ticket"),
    ("repair without --limit", ("repair",) + APPLY, "--limit NODES"),
    ("repair of all nodes", ("repair",) + BASE + ("--limit", "all"), "--limit NODES"),
    ("repair with -e gpuops_remediate", ("repair",) + BASE + ("--limit", "n1", "-e", "gpuops_remediate=false"),
     "-e gpuops_remediate"),
    ("confirmation mismatch", ("upgrade",) + BASE + ("--apply", "--ticket", "CHG-1", "--confirm", "prod"),
     "confirmation"),
    ("cluster name is a list", ("upgrade", "-i", "<DIR>/list-cluster.yml", "--data-dir", "<DIR>/data",
                                "--apply", "--ticket", "CHG-1", "--confirm", "lab"), "gpuops_cluster_name"),
    ("hosts of two clusters", ("bootstrap", "-i", "<DIR>/two-clusters.yml", "--data-dir", "<DIR>/data",
                               "--apply", "--ticket", "CHG-1", "--confirm", "lab"), "x1"),
    ("host list without a cluster", ("bootstrap", "-i", "n1,n2,", "--data-dir", "<DIR>/data",
                                     "--apply", "--ticket", "CHG-1", "--confirm", "lab"), "gpuops_cluster_name"),
]


def snapshot(folder):
    found = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            with open(os.path.join(root, name), "rb") as stream:
                found[os.path.relpath(os.path.join(root, name), folder)] = stream.read()
    return found


def assert_clean_failure(done, field):
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert field in done.stderr, done.stderr
    assert HMAC_KEY not in done.stdout + done.stderr


@pytest.mark.parametrize("name, argv, field", USAGE_ERRORS, ids=[case[0] for case in USAGE_ERRORS])
def test_a_usage_error_names_the_option_on_stderr_and_writes_nothing(place, name, argv, field):
    before = snapshot(place["dir"])
    done = gpuops(place, *argv)
    assert done.returncode == exitcodes.USAGE, (name, done.stdout, done.stderr)
    assert_clean_failure(done, field)
    assert done.stdout == ""
    assert snapshot(place["dir"]) == before, name


@pytest.mark.parametrize("name, argv, field", REFUSALS, ids=[case[0] for case in REFUSALS])
def test_a_refusal_names_the_cause_on_stderr_runs_nothing_and_leaves_only_its_record(place, name, argv, field):
    done = gpuops(place, *argv)
    assert done.returncode == exitcodes.REFUSED, (name, done.stdout, done.stderr)
    assert_clean_failure(done, field)
    assert done.stderr.startswith("gpuops: refused: ")
    with open(place["data"] / "audit.jsonl") as stream:
        trail = [json.loads(line) for line in stream]
    assert [record["event"] for record in trail] == ["refused"]
    runs = os.listdir(place["data"] / "runs")
    assert len(runs) == 1 and not os.path.exists(place["data"] / "runs" / runs[0] / "artifacts")
    for content in snapshot(place["data"]).values():
        assert HMAC_KEY.encode() not in content and b"OTHER-9" not in content and b"abc123" not in content


def test_there_are_at_least_thirty_bad_inputs():
    assert len(USAGE_ERRORS) + len(REFUSALS) >= 30


def test_an_unwritable_trail_stops_the_apply_before_anything_runs(place):
    """Issue 27 point 2: no change before the trail is writable (/proc/version: not writable, even by root)."""
    done = gpuops(place, "upgrade", *APPLY, "--audit-log", "/proc/version")
    assert done.returncode == exitcodes.AUDIT_UNWRITABLE, done.stdout + done.stderr
    assert_clean_failure(done, "--audit-log: /proc/version cannot be written")
    assert os.listdir(place["data"] / "runs") == []


def test_version_and_help_name_each_subcommand(place):
    version = gpuops(place, "--version")
    assert version.returncode == 0 and version.stdout.startswith("gpuops ") and "ansible-runner" in version.stdout
    helps = {name: gpuops(place, name, "--help").stdout.split("\n\n")[1] for name in ("plan", "upgrade")}
    assert helps["plan"] != helps["upgrade"] and "never changing anything" in helps["plan"]
