"""A small OCI image archive built locally from Debian's `busybox-static` package (no registry): what `ctr images
import` takes. The layer holds `/bin/busybox` and the applet links the tests use."""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile

from gpulab import noderuntime

IMAGE_NAME = "docker.io/gpuops/busybox:cdi"
APPLETS = ("sh", "ls", "cat", "env", "grep", "stat", "test", "echo", "true")


def _blob(layout: tarfile.TarFile, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + digest)
    info.size = len(data)
    layout.addfile(info, io.BytesIO(data))
    return {"digest": "sha256:" + digest, "size": len(data)}


def _layer(busybox: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for directory in ("bin", "dev", "proc", "sys", "etc", "tmp", "usr", "usr/bin"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            layer.addfile(info)
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(busybox), 0o755
        layer.addfile(info, io.BytesIO(busybox))
        for applet in APPLETS:
            info = tarfile.TarInfo("bin/" + applet)
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            layer.addfile(info)
    return buffer.getvalue()


def build_busybox_archive(dest: str) -> str:
    """Write the OCI archive (index.json, oci-layout, blobs) to ``dest``; returns ``dest``."""
    deb = noderuntime.fetch_deb("busybox-static", "trixie")
    with tempfile.TemporaryDirectory() as unpacked:
        subprocess.run(["dpkg-deb", "-x", deb, unpacked], check=True)
        with open(os.path.join(unpacked, "usr", "bin", "busybox"), "rb") as stream:
            busybox = stream.read()
    layer = _layer(busybox)
    with tarfile.open(dest, "w") as layout:
        layer_desc = dict(_blob(layout, layer), mediaType="application/vnd.oci.image.layer.v1.tar")
        config = {"architecture": "amd64", "os": "linux",
                  "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
                  "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]}}
        config_desc = dict(_blob(layout, json.dumps(config).encode()),
                           mediaType="application/vnd.oci.image.config.v1+json")
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": config_desc, "layers": [layer_desc]}
        manifest_desc = dict(_blob(layout, json.dumps(manifest).encode()),
                             mediaType="application/vnd.oci.image.manifest.v1+json",
                             annotations={"io.containerd.image.name": IMAGE_NAME,
                                          "org.opencontainers.image.ref.name": "cdi"},
                             platform={"architecture": "amd64", "os": "linux"})
        for name, data in (("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
                           ("index.json", json.dumps({"schemaVersion": 2, "manifests": [manifest_desc]}).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            layout.addfile(info, io.BytesIO(data))
    return dest
