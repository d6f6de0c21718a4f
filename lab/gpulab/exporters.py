"""Metrics endpoints of the fleet twin, for a real Prometheus to scrape: one dcgm-exporter-style ``/metrics`` per
node (on the node's address, port 9400 as dcgm-exporter's default) and one kube-state-metrics-style endpoint for
the cluster (127.0.0.1, a free port).

Metric and label names are dcgm-exporter 4.x's and kube-state-metrics' (those ``files/prometheus/gpu-alerts.yml``
uses). Rendering is pure (``dcgm_exposition``, ``ksm_exposition``); ``MetricsServer`` serves whatever its
``render()`` callable returns at each scrape, so the values follow the twin's live state. Standard library only.
"""
from __future__ import annotations

import http.server
import socket
import threading

DCGM_PORT = 9400

# (name, type, help) in dcgm-exporter's default-counters order, with its help texts
DCGM_FIELDS = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Frame buffer memory free (in MB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Frame buffer memory used (in MB)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_RETIRED_PENDING", "gauge", "Number of pages pending retirement."),
)


def dcgm_bus_id(pci_address: str) -> str:
    """0000:18:00.0 as DCGM writes a PCI bus id: 00000000:18:00.0 (8-digit domain, upper case)."""
    domain, rest = pci_address.split(":", 1)
    return "%08X:%s" % (int(domain, 16), rest.upper())


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _series(name: str, labels: dict, value) -> str:
    inner = ",".join('%s="%s"' % (key, _escape(labels[key])) for key in labels)
    return "%s{%s} %s" % (name, inner, value)


def _exposition(families: list) -> str:
    """families: [(name, type, help, [(labels, value), ...])]; families without samples are left out."""
    lines = []
    for name, metric_type, help_text, samples in families:
        if not samples:
            continue
        lines += ["# HELP %s %s" % (name, help_text), "# TYPE %s %s" % (name, metric_type)]
        lines += [_series(name, labels, value) for labels, value in samples]
    return "\n".join(lines) + "\n" if lines else ""


def gpu_readings(gpu: dict, last_xid: int) -> dict:
    """DCGM field -> value of one GPU that answers (hw.json GPU state, nvidia/profiles.py schema)."""
    used = int(gpu.get("memory_used_mib") or 0)
    free = int(gpu["memory_total_mib"]) - int(gpu.get("memory_reserved_mib") or 0) - used
    return {
        "DCGM_FI_DEV_GPU_TEMP": int(gpu.get("temperature_c") or 0),
        "DCGM_FI_DEV_GPU_UTIL": 100 if gpu.get("processes") else 0,
        "DCGM_FI_DEV_FB_FREE": max(0, free),
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_XID_ERRORS": last_xid,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": int(gpu.get("pcie_replay_count") or 0),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": int(gpu.get("ecc_volatile_uncorrectable") or 0),
        "DCGM_FI_DEV_RETIRED_PENDING": 1 if gpu.get("retired_pages_pending") or gpu.get("remapped_rows_pending")
        else 0,
    }


def dcgm_exposition(hostname: str, gpus: list, driver_version, last_xid_by_gpu: dict) -> str:
    """What dcgm-exporter on ``hostname`` serves. Nothing without a loaded driver (``driver_version`` None: node
    down, module not loaded, or a version mismatch that NVML refuses). A GPU off the bus (Xid 79) keeps only its
    DCGM_FI_DEV_XID_ERRORS series (the Xid DCGM recorded); its readings are gone."""
    if not driver_version:
        return ""
    samples = {name: [] for name, _type, _help in DCGM_FIELDS}
    for gpu in sorted(gpus, key=lambda one: one["index"]):
        labels = {"gpu": str(gpu["index"]), "UUID": gpu["uuid"], "pci_bus_id": dcgm_bus_id(gpu["pci_address"]),
                  "device": "nvidia%d" % gpu["index"], "modelName": gpu["name"], "Hostname": hostname,
                  "DCGM_FI_DRIVER_VERSION": driver_version}
        last_xid = int(last_xid_by_gpu.get(gpu["index"], 0))
        if not gpu.get("on_bus", True):
            samples["DCGM_FI_DEV_XID_ERRORS"].append((labels, last_xid))
            continue
        for name, value in gpu_readings(gpu, last_xid).items():
            samples[name].append((labels, value))
    return _exposition([(name, metric_type, help_text, samples[name]) for name, metric_type, help_text in DCGM_FIELDS])


def _quantity_integer(value) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def ksm_exposition(nodes: list) -> str:
    """kube-state-metrics' node series for GPU nodes' scheduling: capacity and allocatable of nvidia.com/gpu
    (resource="nvidia_com_gpu", unit="integer"), spec.unschedulable, and the Ready condition."""
    capacity, allocatable, unschedulable, ready = [], [], [], []
    for node in sorted(nodes, key=lambda one: one["metadata"]["name"]):
        name = node["metadata"]["name"]
        status = node.get("status") or {}
        resource = {"node": name, "resource": "nvidia_com_gpu", "unit": "integer"}
        if "nvidia.com/gpu" in (status.get("capacity") or {}):
            capacity.append((resource, _quantity_integer(status["capacity"]["nvidia.com/gpu"])))
        if "nvidia.com/gpu" in (status.get("allocatable") or {}):
            allocatable.append((resource, _quantity_integer(status["allocatable"]["nvidia.com/gpu"])))
        unschedulable.append(({"node": name}, 1 if (node.get("spec") or {}).get("unschedulable") else 0))
        condition = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        state = (condition or {}).get("status", "Unknown").lower()
        for one in ("true", "false", "unknown"):
            ready.append(({"node": name, "condition": "Ready", "status": one}, 1 if one == state else 0))
    return _exposition([
        ("kube_node_status_capacity", "gauge", "The capacity for different resources of a node.", capacity),
        ("kube_node_status_allocatable", "gauge", "The allocatable for different resources of a node that are "
         "available for scheduling.", allocatable),
        ("kube_node_spec_unschedulable", "gauge", "Whether a node can schedule new pods.", unschedulable),
        ("kube_node_status_condition", "gauge", "The condition of a cluster node.", ready),
    ])


class MetricsServer:
    """``/metrics`` on (host, port) answering ``render()`` (text exposition format 0.0.4); port 0 = a free one.
    ``stop()`` closes it."""

    def __init__(self, host: str, port: int, render):
        server_render = render

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                try:
                    body = server_render().encode()
                except Exception as error:  # a scrape error, as an exporter reports it
                    self.send_error(500, str(error))
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True
            address_family = socket.AF_INET

        self._server = Server((host, port), Handler)
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def target(self) -> str:
        return "%s:%d" % (self.host, self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
