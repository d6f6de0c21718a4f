"""The requests the twin's Kubernetes API server recorded (``DIR/kube-records.jsonl``): which client listed or
watched what, and when. Used by lab/tests and benchmarks/."""
from __future__ import annotations

import json
import os
import time


def requests(state_dir: str, since: float, verb=None, path_part: str = "", user_agent_part: str = "") -> list:
    """Requests the twin's API server recorded (when each ended) since `since` (epoch seconds)."""
    found = []
    with open(os.path.join(state_dir, "kube-records.jsonl")) as stream:
        for line in stream:
            if '"record":"request"' not in line:
                continue
            record = json.loads(line)
            if record["ts"] >= since and (verb is None or record.get("verb") == verb) \
                    and path_part in record.get("path", "") and user_agent_part in (record.get("user_agent") or ""):
                found.append(record)
    return found


def watch_requests(state_dir: str, since: float, path_part: str = "/nodes") -> int:
    """Watch requests on paths containing `path_part` that ended since `since` (a watch is recorded when it
    closes)."""
    return len(requests(state_dir, since, "watch", path_part))


def wait_listed(state_dir: str, since: float, user_agent_part: str, path_part: str = "/nodes",
                timeout_s: float = 120.0) -> None:
    """Waits until a client (by user agent) has listed `path_part` since `since`: its watch follows at once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if requests(state_dir, since, "list", path_part, user_agent_part):
            return
        time.sleep(0.1)
    raise AssertionError("no list of %s by %s within %ss" % (path_part, user_agent_part, timeout_s))
