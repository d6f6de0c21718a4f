"""A real Prometheus (Debian's `prometheus`) on loopback, scraping a DCGM-exporter-style /metrics endpoint that the
test serves and changes: for the prometheus_gate and alert-rule tests and for capturing API fixtures
(hack/capture-prometheus-fixtures.py). It needs no lab; the Prometheus process is gpulab's own helper
(gpulab.prometheus), which `gpulab up --prometheus` uses too.
"""
from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time

LAB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if LAB_DIR not in sys.path:  # hack/capture-prometheus-fixtures.py imports this file without the conftest
    sys.path.insert(0, LAB_DIR)

from gpulab.prometheus import Prometheus, free_port, scrape_config, write_config  # noqa: E402,F401 (free_port: for tests)

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


def series_key(name: str, labels: dict) -> str:
    inner = ",".join('%s="%s"' % (key, str(value).replace("\\", "\\\\").replace('"', '\\"'))
                     for key, value in labels.items())
    return "%s{%s}" % (name, inner)


class MetricsEndpoint:
    """/metrics on 127.0.0.1:<free port> in the text exposition format; `set` changes a series, `drop` removes it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._series = {}  # series_key -> (name, value)
        self._help = {}
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = endpoint.exposition().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return "127.0.0.1:%d" % self._server.server_address[1]

    def set(self, name: str, labels: dict, value, help_text: str = "", metric_type: str = "gauge") -> None:
        with self._lock:
            self._series[series_key(name, labels)] = (name, value)
            self._help.setdefault(name, (help_text or name, metric_type))

    def drop(self, name: str, labels: dict) -> None:
        with self._lock:
            self._series.pop(series_key(name, labels), None)

    def exposition(self) -> str:
        with self._lock:
            lines, seen = [], set()
            for key, (name, value) in sorted(self._series.items()):
                if name not in seen:
                    seen.add(name)
                    help_text, metric_type = self._help[name]
                    lines += ["# HELP %s %s" % (name, help_text), "# TYPE %s %s" % (name, metric_type)]
                lines.append("%s %s" % (key, value))
            return "\n".join(lines) + "\n"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class PrometheusServer(Prometheus):
    """`prometheus` on 127.0.0.1:<free port> with its TSDB in work_dir, scraping `targets` every second and
    evaluating `rule_files` every second; every query it answers is logged to `query_log_path` (JSON lines).
    Always `stop()` it (the fixtures do). The process itself is gpulab's helper (lab/gpulab/prometheus.py)."""

    def __init__(self, work_dir: str, targets, rule_files=(), interval: str = "1s", tls=None):
        self.query_log_path = os.path.join(work_dir, "queries.log")
        config = scrape_config({}, interval=interval, rule_files=rule_files, query_log_file=self.query_log_path)
        config["scrape_configs"] = [{"job_name": "dcgm-exporter", "static_configs": [{"targets": list(targets)}]}]
        web_config_path = None
        if tls:  # (certificate file, key file): serve HTTPS
            web_config_path = os.path.join(work_dir, "web.yml")
            with open(web_config_path, "w") as web_config:
                json.dump({"tls_server_config": {"cert_file": tls[0], "key_file": tls[1]}}, web_config)
        super().__init__(write_config(os.path.join(work_dir, "prometheus.yml"), config), work_dir, web_config_path)
        self.start()

    def wait_for(self, predicate, what: str, timeout_s: float = 30, poll_s: float = 0.2):
        """Poll predicate() until it returns something truthy; that value, or an AssertionError naming `what`."""
        deadline, last = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(poll_s)
        raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout_s, what, last))

    def queries_answered(self, promql: str) -> int:
        """How many times Prometheus answered an API query with this exact expression (from its query log)."""
        try:
            with open(self.query_log_path) as log:
                entries = [json.loads(line) for line in log if line.strip()]
        except FileNotFoundError:
            return 0
        # rule evaluations are logged too, without an httpRequest
        return sum(1 for entry in entries if "httpRequest" in entry and entry.get("params", {}).get("query") == promql)

    def firing(self, alertname: str) -> list:
        _status, body = self.get("/api/v1/alerts")
        alerts = json.loads(body)["data"]["alerts"]
        return [alert for alert in alerts if alert["labels"].get("alertname") == alertname and alert["state"] == "firing"]


def make_loopback_tls(directory: str) -> dict:
    """A CA and a server certificate for 127.0.0.1 (IP SAN) made with openssl: {ca, cert, key} file paths."""
    paths = {name: os.path.join(directory, name + ".pem") for name in ("ca", "ca-key", "cert", "key", "csr")}
    ext = os.path.join(directory, "san.cnf")
    with open(ext, "w") as ext_file:
        ext_file.write("subjectAltName=IP:127.0.0.1\n")
    for argv in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=gpuops test CA",
         "-keyout", paths["ca-key"], "-out", paths["ca"]],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", paths["key"],
         "-out", paths["csr"]],
        ["x509", "-req", "-in", paths["csr"], "-CA", paths["ca"], "-CAkey", paths["ca-key"], "-CAcreateserial",
         "-days", "2", "-extfile", ext, "-out", paths["cert"]],
    ):
        subprocess.run(["openssl"] + argv, check=True, capture_output=True, timeout=60)
    return {"ca": paths["ca"], "cert": paths["cert"], "key": paths["key"]}


def dcgm_labels(hostname: str, gpu: int, model: str = "NVIDIA H100 80GB HBM3", driver: str = "595.91.07",
                **pod) -> dict:
    """The label set dcgm-exporter 4.x puts on a GPU's series (pod/namespace/container when allocated to a pod)."""
    labels = {"gpu": str(gpu), "UUID": "GPU-5fb5a1b7-0000-4000-8000-%012d" % gpu,
              "pci_bus_id": "00000000:%02X:00.0" % (0x18 + gpu), "device": "nvidia%d" % gpu, "modelName": model,
              "Hostname": hostname, "DCGM_FI_DRIVER_VERSION": driver}
    labels.update(pod)
    return labels


def ksm_labels(node: str) -> dict:
    """kube-state-metrics' labels on kube_node_status_capacity/allocatable for the nvidia.com/gpu resource."""
    return {"node": node, "resource": "nvidia_com_gpu", "unit": "integer"}
