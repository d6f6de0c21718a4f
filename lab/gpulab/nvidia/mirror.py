"""A loopback HTTP mirror of the lab's runfiles (``DIR/runfiles``) with a ``SHA256SUMS`` file, as an air-gapped
site mirrors NVIDIA's downloads: ``up`` starts it and writes its URLs into the inventory
(``nvidia_driver_runfile_url``, ``nvidia_driver_runfile_checksum``), so the driver role runs against the twin
with no extra variable. Unknown paths answer 404 as a web server does. Standard library only.
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import os
import threading

SUMS_NAME = "SHA256SUMS"


def write_sha256sums(directory: str) -> str:
    """`sha256sum *.run` of the directory into SHA256SUMS (the format get_url and sha256sum -c read)."""
    lines = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".run"):
            digest = hashlib.sha256()
            with open(os.path.join(directory, name), "rb") as stream:
                for block in iter(lambda: stream.read(1 << 20), b""):
                    digest.update(block)
            lines.append("%s  %s\n" % (digest.hexdigest(), name))
    path = os.path.join(directory, SUMS_NAME)
    with open(path + ".tmp", "w", encoding="utf-8") as stream:
        stream.writelines(lines)
    os.replace(path + ".tmp", path)
    return path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class RunfileMirror:
    """Serves `directory` on 127.0.0.1 (an ephemeral port) until stop()."""

    def __init__(self, directory: str, host: str = "127.0.0.1"):
        write_sha256sums(directory)
        handler = functools.partial(_QuietHandler, directory=directory)
        self.server = http.server.ThreadingHTTPServer((host, 0), handler)
        self.server.daemon_threads = True
        self.url = "http://%s:%d" % (host, self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="runfile-mirror", daemon=True)

    def start(self) -> "RunfileMirror":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def inventory_vars(self) -> dict:
        """What the inventory sets so the nvidia_driver role downloads from here and checks SHA256SUMS."""
        return {"nvidia_driver_runfile_url": self.url + "/NVIDIA-Linux-x86_64-{{ nvidia_driver_version }}.run",
                "nvidia_driver_runfile_checksum": "sha256:%s/%s" % (self.url, SUMS_NAME),
                # the twin's mirror is the test's own: trusting the sums it serves beside the runfiles is explicit
                "nvidia_driver_runfile_checksum_trust_mirror": True}
