"""A real Alertmanager (Debian's `prometheus-alertmanager`) on 127.0.0.1:<free port>, without gossip, with its
silences in a temporary directory: for the alertmanager_silence tests and for capturing API fixtures
(hack/capture-alertmanager-fixtures.py). Standard library only.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if LAB_DIR not in sys.path:  # the capture script imports this file without the conftest
    sys.path.insert(0, LAB_DIR)

from gpulab.prometheus import free_port  # noqa: E402

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
READY_TIMEOUT_S = 30
# one receiver that sends nowhere: the tests read Alertmanager's API, nothing is notified
CONFIG = "route:\n  receiver: nowhere\n  group_wait: 0s\nreceivers:\n  - name: nowhere\n"


class AlertmanagerServer:
    """``start()`` runs it; ``url``; ``call(method, path, body)`` -> (status, parsed JSON or text); ``stop()``."""

    def __init__(self, work_dir: str):
        self.work_dir = work_dir
        self.process = None
        self.port = None
        self.log_path = os.path.join(work_dir, "alertmanager.log")

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def start(self, attempts: int = 3) -> "AlertmanagerServer":
        if ALERTMANAGER is None:
            raise RuntimeError("alertmanager not installed (Debian package prometheus-alertmanager)")
        os.makedirs(self.work_dir, exist_ok=True)
        config_path = os.path.join(self.work_dir, "alertmanager.yml")
        with open(config_path, "w") as config:
            config.write(CONFIG)
        for _attempt in range(attempts):
            self.port = free_port()
            argv = [ALERTMANAGER, "--config.file=" + config_path,
                    "--storage.path=" + os.path.join(self.work_dir, "data"),
                    "--web.listen-address=127.0.0.1:%d" % self.port,
                    "--cluster.listen-address="]  # empty: no gossip port, a single instance
            with open(self.log_path, "w") as log:
                self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)
            if self._wait_ready():
                return self
            self.stop()  # the port was taken meanwhile: try another
        raise RuntimeError("alertmanager did not become ready; its log:\n" + self.log())

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if self.call("GET", "/-/ready")[0] == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def call(self, method: str, path: str, body=None, timeout: float = 10):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        text = raw.decode("utf-8", "replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def silences(self) -> list:
        status, silences = self.call("GET", "/api/v2/silences")
        assert status == 200, silences
        return silences

    def post_alerts(self, alerts: list) -> None:
        status, answer = self.call("POST", "/api/v2/alerts", alerts)
        assert status == 200, answer

    def alerts(self) -> list:
        status, alerts = self.call("GET", "/api/v2/alerts")
        assert status == 200, alerts
        return alerts

    def log(self) -> str:
        try:
            with open(self.log_path) as log:
                return log.read()
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
