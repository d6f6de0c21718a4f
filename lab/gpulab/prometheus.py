"""A real Prometheus (Debian's ``prometheus``) on a free loopback port, for the twin's tests, ``gpulab up
--prometheus`` and the demo; and the scrape configuration of a lab's metrics endpoints (``DIR/prometheus.yml``).

``Prometheus(config_path, work_dir).start()`` runs it with its TSDB in ``work_dir/data`` and its log in
``work_dir/prometheus.log``; ``stop()`` ends it. Standard library only.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

READY_TIMEOUT_S = 30


def prometheus_binary():
    return shutil.which("prometheus")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def scrape_config(dcgm_targets: dict, ksm_target=None, interval: str = "1s", rule_files=(),
                  query_log_file=None) -> dict:
    """Prometheus configuration scraping the lab: job ``dcgm-exporter`` (one target per node, labelled with the
    node's name as ``node``) and job ``kube-state-metrics`` (``honor_labels``, as it is usually scraped)."""
    global_section = {"scrape_interval": interval, "evaluation_interval": interval}
    if query_log_file:
        global_section["query_log_file"] = query_log_file
    scrape_configs = [{"job_name": "dcgm-exporter",
                       "static_configs": [{"targets": [target], "labels": {"node": node}}
                                          for node, target in sorted(dcgm_targets.items())]}]
    if ksm_target:
        scrape_configs.append({"job_name": "kube-state-metrics", "honor_labels": True,
                               "static_configs": [{"targets": [ksm_target]}]})
    return {"global": global_section, "rule_files": [os.path.abspath(path) for path in rule_files],
            "scrape_configs": scrape_configs}


def write_config(path: str, config: dict) -> str:
    with open(path, "w") as stream:
        stream.write("# written by gpulab (lab/gpulab/prometheus.py); JSON is YAML\n")
        json.dump(config, stream, indent=1)
        stream.write("\n")
    return path


class Prometheus:
    """One ``prometheus`` process on 127.0.0.1:<free port>."""

    def __init__(self, config_path: str, work_dir: str, web_config_path=None):
        self.config_path = config_path
        self.work_dir = work_dir
        self.web_config_path = web_config_path
        self.log_path = os.path.join(work_dir, "prometheus.log")
        self.process = None
        self.port = None

    @property
    def url(self) -> str:
        return "%s://127.0.0.1:%d" % ("https" if self.web_config_path else "http", self.port)

    def start(self, attempts: int = 3) -> "Prometheus":
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError("prometheus not installed (Debian package prometheus)")
        os.makedirs(self.work_dir, exist_ok=True)
        for _attempt in range(attempts):
            self.port = free_port()
            argv = [binary, "--config.file", self.config_path,
                    "--storage.tsdb.path", os.path.join(self.work_dir, "data"),
                    "--web.listen-address", "127.0.0.1:%d" % self.port]
            if self.web_config_path:
                argv += ["--web.config.file", self.web_config_path]
            with open(self.log_path, "w") as log:
                self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)
            if self._wait_ready(READY_TIMEOUT_S):
                return self
            self.stop()  # another process took the port between free_port() and the bind: try a new one
        raise RuntimeError("prometheus did not become ready; its log:\n" + self.log())

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with self._open(urllib.request.Request(self.url + "/-/ready"), timeout=2) as answer:
                    if answer.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        return False

    def _open(self, request, timeout):
        """urlopen; the helper itself does not verify a test's own certificate (the code under test does)."""
        context = None
        if self.web_config_path:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return urllib.request.urlopen(request, timeout=timeout, context=context)

    def log(self) -> str:
        try:
            with open(self.log_path) as log:
                return log.read()
        except FileNotFoundError:
            return ""

    def get(self, path: str, params=None, method: str = "GET"):
        """(HTTP status, body text) of an API call; errors are answers too."""
        data = None
        url = self.url + path
        if params and method == "GET":
            url += "?" + urllib.parse.urlencode(params)
        elif params:
            data = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(url, data=data, method=method)
        try:
            with self._open(request, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def query(self, promql: str) -> dict:
        _status, body = self.get("/api/v1/query", {"query": promql})
        return json.loads(body)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
