#!/usr/bin/env python3
"""Capture real Alertmanager API v2 answers into tests/unit/fixtures/alertmanager/ (see PROVENANCE.md there).

Starts Debian's `prometheus-alertmanager` on loopback (lab/tests/alertmanager_harness.py), makes the silences a
driver maintenance makes (one per node label, the comment carrying the run marker), one a person made, one of
another node and one expired, and saves each answer's body byte for byte with its HTTP status in the file name.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_DIR, "lab", "tests"))

from alertmanager_harness import AlertmanagerServer  # noqa: E402

OUT_DIR = os.path.join(REPO_DIR, "tests", "unit", "fixtures", "alertmanager")
RUN = "20261203T020000Z-1a2b"


def rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + ".000Z"


def silence(matchers, comment, created_by="alice@bastion/" + RUN, hours=2):
    now = time.time()
    return {"matchers": [dict(name=name, value=value, isRegex=regex, isEqual=True) for name, value, regex in matchers],
            "startsAt": rfc3339(now), "endsAt": rfc3339(now + hours * 3600), "createdBy": created_by,
            "comment": comment}


def raw(server, method, path, body=None):
    """(status, body bytes) exactly as Alertmanager sent them."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def save(name, status, body):
    path = os.path.join(OUT_DIR, name)
    with open(path, "wb") as out:
        out.write(body)
    print("%s  HTTP %d  %d bytes" % (name, status, len(body)))


def main() -> int:
    os.makedirs(OUT_DIR, exist_ok=True)
    with tempfile.TemporaryDirectory() as work_dir:
        server = AlertmanagerServer(work_dir).start()
        try:
            marker = "driver upgrade to 615.71.09 [gpuops.nvidia node=gpu-node-01 run=%s]" % RUN
            status, body = raw(server, "POST", "/api/v2/silences",
                               silence([("instance", "gpu-node-01(:[0-9]+)?", True)], marker))
            save("post_silence_created_200.json", status, body)
            for matcher in (("Hostname", "gpu-node-01", False), ("node", "gpu-node-01", False)):
                raw(server, "POST", "/api/v2/silences", silence([matcher], marker))
            raw(server, "POST", "/api/v2/silences",
                silence([("node", "gpu-node-02", False)], marker.replace("gpu-node-01", "gpu-node-02")))
            raw(server, "POST", "/api/v2/silences",
                silence([("Hostname", "gpu-node-01", False), ("alertname", "GPUTemperatureHigh", False)],
                        "fan swap, ticket OPS-1234", created_by="bob"))
            status, body = raw(server, "POST", "/api/v2/silences",
                               silence([("node", "gpu-node-01", False)], marker.replace(RUN, "20261201T010000Z-0000")))
            raw(server, "DELETE", "/api/v2/silence/" + json.loads(body)["silenceID"])
            save("get_silences_200.json", *raw(server, "GET", "/api/v2/silences"))
            save("get_silences_filter_hostname_200.json",
                 *raw(server, "GET", "/api/v2/silences?filter=" + urllib.request.quote('Hostname="gpu-node-01"')))
            save("get_silences_bad_filter_400.json",
                 *raw(server, "GET", "/api/v2/silences?filter=" + urllib.request.quote("not a matcher")))
            save("post_silence_matches_empty_400.json",
                 *raw(server, "POST", "/api/v2/silences", silence([("node", ".*", True)], "everything")))
            save("delete_silence_unknown_500.json",
                 *raw(server, "DELETE", "/api/v2/silence/00000000-0000-0000-0000-000000000000"))
            save("delete_silence_not_uuid_422.json", *raw(server, "DELETE", "/api/v2/silence/not-a-uuid"))
            save("wrong_prefix_404.txt", *raw(server, "GET", "/alertmanager/api/v2/silences"))
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
