"""The lab's metrics, owned by the daemon: a dcgm-exporter-style endpoint per node (``NODE_IP:9400``), a
kube-state-metrics-style endpoint for the Kubernetes twin (127.0.0.1, free port), ``DIR/prometheus.yml`` scraping
them, and, with ``up --prometheus``, a real Prometheus on loopback using that file.

Each scrape renders the node's live state: ``run/hw.json`` (Xid effects, GPUs off the bus), whether the node is up
with its module loaded, and the last Xid per GPU, which DCGM remembers from the driver's Xid events since the
driver was loaded (here: ``fault`` events of ``xid:`` kinds since the node's last boot; a GPU reset clears it).
"""
from __future__ import annotations

import os
import threading

from gpulab.exporters import DCGM_PORT, MetricsServer, dcgm_exposition, ksm_exposition
from gpulab.prometheus import Prometheus, scrape_config, write_config

PROMETHEUS_CONFIG = "prometheus.yml"
PROMETHEUS_DIR = "prometheus"


class LabMetrics:
    def __init__(self, lab):
        self.lab = lab
        self.servers = []
        self.dcgm_targets = {}
        self.ksm_target = None
        self.prometheus = None
        self._lock = threading.Lock()
        self._last_xid = {}   # node name -> {gpu index: Xid code}

    # ---- what a scrape shows ------------------------------------------------------------------------------
    def on_event(self, event: dict) -> None:
        node, kind, fault = event.get("node"), event.get("kind"), str(event.get("fault") or "")
        with self._lock:
            if kind == "booting":
                self._last_xid.pop(node, None)
            elif kind == "fault" and fault.startswith("xid:"):
                code, gpu = int(fault.split(":")[1]), int(event.get("gpu_index") or 0)
                self._last_xid.setdefault(node, {})[gpu] = code
            elif kind == "clear" and fault.startswith("xid:"):
                parts = fault.split(":")
                self._last_xid.get(node, {}).pop(int(parts[2]) if len(parts) > 2 else 0, None)

    def node_driver_version(self, node):
        """The driver DCGM would report, None when DCGM cannot run (node down, no module, version mismatch)."""
        if node.status != "up" or not node.is_running() or not node.state.get("module_loaded") \
                or "driver-mismatch" in node.faults:
            return None
        return node.state.get("kernel_driver_version")

    def dcgm_text(self, node) -> str:
        driver = self.node_driver_version(node)
        if driver is None:
            return ""
        with self._lock:
            last_xid = dict(self._last_xid.get(node.name, {}))
        return dcgm_exposition(node.name, node.hw().get("gpus") or [], driver, last_xid)

    def ksm_text(self) -> str:
        cluster = self.lab.cluster
        if cluster is None:
            return ""
        nodes, _version = cluster.store.list("nodes")
        return ksm_exposition(nodes)

    # ---- lifecycle -----------------------------------------------------------------------------------------
    def start(self, with_prometheus: bool, rule_files=(), interval: str = "1s") -> dict:
        self.lab.events.subscribe(self.on_event)
        for node in self.lab.nodes:
            server = self._serve(node.ip, (lambda one=node: self.dcgm_text(one)))
            self.dcgm_targets[node.name] = server.target
        if self.lab.cluster is not None:
            self.ksm_target = self._serve("127.0.0.1", self.ksm_text, port=0).target
        config_path = write_config(os.path.join(self.lab.state_dir, PROMETHEUS_CONFIG),
                                   scrape_config(self.dcgm_targets, self.ksm_target, interval, rule_files))
        info = {"dcgm_exporter": dict(self.dcgm_targets), "kube_state_metrics": self.ksm_target,
                "prometheus_config": config_path, "prometheus_url": None}
        if with_prometheus:
            self.prometheus = Prometheus(config_path, os.path.join(self.lab.state_dir, PROMETHEUS_DIR)).start()
            info.update(prometheus_url=self.prometheus.url, prometheus_pid=self.prometheus.process.pid)
        return info

    def _serve(self, host: str, render, port: int = DCGM_PORT) -> MetricsServer:
        try:
            server = MetricsServer(host, port, render)
        except OSError:  # the port is taken on that address: any free one (the targets say which)
            server = MetricsServer(host, 0, render)
        self.servers.append(server)
        return server

    def stop(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
        for server in self.servers:
            server.stop()
        self.servers = []
