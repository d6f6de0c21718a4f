"""Running the diagnose runbook (`playbooks/diagnose.yml`) against a twin lab with ansible-runner and reading what
it showed and changed per host; shared by the diagnose, MIG and self-check repair twin tests."""
from __future__ import annotations

import os
import sys

from conftest import REPO_DIR, collections_path

PLAYBOOK = os.path.join(REPO_DIR, "playbooks", "diagnose.yml")
SHOW_TASK = "Show the node summary, the failing layer, the cases and their fix"


def run_diagnose(lab, tmp_path, limit=None, check_mode=False, tasks_seen=None, **extravars):
    """(rc, shown message per host, changed task names per host, failed hosts). `tasks_seen`, a dict, receives
    each host's ok/changed task results by task name (the last one of that name)."""
    import ansible_runner   # imported here: the callers importorskip it
    os.makedirs(str(tmp_path), exist_ok=True)
    result = ansible_runner.run(
        private_data_dir=str(tmp_path), playbook=PLAYBOOK, inventory=os.path.join(lab.state_dir, "inventory.yml"),
        extravars=extravars, quiet=True, limit=limit, cmdline="--check" if check_mode else None,
        envvars={"ANSIBLE_COLLECTIONS_PATH": collections_path() or "",
                 "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
    shown, changed, failed = {}, {}, set()
    for event in result.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok":
            if data.get("task") == SHOW_TASK:
                shown[data["host"]] = data["res"]["msg"]
            # a no_log task's result is censored, changed included: the line printed says it
            if data["res"].get("changed") or "changed: [" in event.get("stdout", ""):
                changed.setdefault(data["host"], []).append(data.get("task"))
            if tasks_seen is not None:
                tasks_seen.setdefault(data["host"], {})[data.get("task")] = data["res"]
        elif event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            failed.add(data["host"])
            if tasks_seen is not None:
                tasks_seen.setdefault(data["host"], {})[data.get("task")] = dict(data["res"], failed=True)
    return result.rc, shown, changed, failed
