"""A loopback mirror of NVIDIA's package repositories, laid out and signed as NVIDIA publishes them, so the
collection's roles install NVIDIA's packages by their real names from a mirror, as an air-gapped site does.

Tree (served from `DIR/nvidia-repos` on `127.0.0.1:<ephemeral>`; unknown paths answer 404):

    libnvidia-container/gpgkey                          the repository's public key (ASCII-armoured)
    libnvidia-container/stable/deb/amd64/               flat apt repository (`deb [signed-by=...] <url> /`):
        *.deb  Packages  Release  InRelease  Release.gpg    the toolkit's packages (`toolkit_debs`), signed

The key is the mirror's own (a fresh ed25519 key per `up`, made with the real `gpg`), not NVIDIA's: apt checks
the signature against the key the role fetched from `gpgkey`, exactly as against NVIDIA's. `inventory_vars()`
are the role defaults an air-gapped inventory sets (`container_runtime_toolkit_repo_base_url`, `_key_url`).
"""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import tempfile
import threading

from gpulab.nvidia import debs, toolkit_debs

TOOLKIT_VERSIONS = ("1.17.8",)
TOOLKIT_TREE = "libnvidia-container"
TOOLKIT_CHANNEL_DIR = "stable/deb/amd64"
KEY_UID = "gpulab NVIDIA repository mirror <gpulab@localhost>"


def _gpg(home: str, *args: str, output: str | None = None) -> None:
    argv = ["gpg", "--homedir", home, "--batch", "--yes", "--quiet"] + (["--output", output] if output else [])
    subprocess.run(argv + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def sign_flat_repo(repo_dir: str, key_path: str) -> None:
    """`InRelease` and `Release.gpg` of `repo_dir/Release` with a new key whose public half goes to `key_path`."""
    home = tempfile.mkdtemp(prefix="gpulab-gnupg-")
    try:
        _gpg(home, "--passphrase", "", "--quick-gen-key", KEY_UID, "ed25519", "sign", "never")
        _gpg(home, "--armor", "--export", KEY_UID, output=key_path)
        release = os.path.join(repo_dir, "Release")
        _gpg(home, "--clearsign", release, output=os.path.join(repo_dir, "InRelease"))
        _gpg(home, "--armor", "--detach-sign", release, output=os.path.join(repo_dir, "Release.gpg"))
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "gpg-agent"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(home, ignore_errors=True)


def build_toolkit_repo(mirror_dir: str, versions=TOOLKIT_VERSIONS) -> dict:
    """NVIDIA's libnvidia-container apt repository under `mirror_dir`; returns {"dir", "debs", "key"}."""
    tree = os.path.join(mirror_dir, TOOLKIT_TREE)
    repo_dir = os.path.join(tree, TOOLKIT_CHANNEL_DIR)
    os.makedirs(repo_dir, exist_ok=True)
    built = []
    for version in versions:
        built += toolkit_debs.build_packages(repo_dir, version)
    debs.index_flat_repo(repo_dir, label="gpulab mirror of NVIDIA's libnvidia-container")
    key_path = os.path.join(tree, "gpgkey")
    sign_flat_repo(repo_dir, key_path)
    return {"dir": repo_dir, "debs": built, "key": key_path}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class PackageMirror:
    """Builds the repositories into `mirror_dir` and serves them on 127.0.0.1 (an ephemeral port) until stop()."""

    def __init__(self, mirror_dir: str, toolkit_versions=TOOLKIT_VERSIONS, host: str = "127.0.0.1"):
        self.toolkit = build_toolkit_repo(mirror_dir, toolkit_versions)
        handler = functools.partial(_QuietHandler, directory=mirror_dir)
        self.server = http.server.ThreadingHTTPServer((host, 0), handler)
        self.server.daemon_threads = True
        self.url = "http://%s:%d" % (host, self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="package-mirror", daemon=True)

    def start(self) -> "PackageMirror":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def inventory_vars(self) -> dict:
        """What the inventory sets so the container_runtime role installs the toolkit from here."""
        return {"container_runtime_toolkit_repo_base_url": "%s/%s" % (self.url, TOOLKIT_TREE),
                "container_runtime_toolkit_repo_key_url": "%s/%s/gpgkey" % (self.url, TOOLKIT_TREE)}
