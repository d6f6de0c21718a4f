"""Local apt packages of the stub driver, for the "package" install method (a flat `file:` apt repository).

Laid out like NVIDIA's CUDA repository for Debian 12: per driver version `nvidia-driver` (metapackage),
`nvidia-kernel-dkms` / `nvidia-kernel-open-dkms` (module sources registered with real dkms by the postinst, plus the
nouveau blacklist), `nvidia-smi`, `libnvidia-ml1`, `libcuda1`, `firmware-nvidia-gsp`. Built with the real
`dpkg-deb` and indexed with `dpkg-scanpackages`. The repository goes into `DIR/cache/apt`, which every node sees at
`/opt/gpulab/cache/apt`, so a node uses it with:

    deb [trusted=yes] file:/opt/gpulab/cache/apt ./
"""
from __future__ import annotations

import datetime
import hashlib
import os
import shutil
import subprocess
import tempfile

from gpulab.nvidia import installer, kmodbuild

NODE_REPO_PATH = "/opt/gpulab/cache/apt"
DEB_REVISION = "1"
NOUVEAU_BLACKLIST = b"# installed by nvidia-kernel-dkms\nblacklist nouveau\noptions nouveau modeset=0\n"


def source_line(node_path: str = NODE_REPO_PATH) -> str:
    return "deb [trusted=yes] file:%s ./" % node_path


def _control(name: str, version: str, description: str, depends: str = "", extra: str = "") -> str:
    lines = ["Package: %s" % name, "Version: %s-%s" % (version, DEB_REVISION), "Architecture: amd64",
             "Maintainer: gpulab <gpulab@localhost>", "Section: non-free/kernel", "Priority: optional"]
    if depends:
        lines.append("Depends: %s" % depends)
    if extra:
        lines.append(extra)
    lines.append("Description: %s (gpulab stub of NVIDIA driver %s)" % (description, version))
    return "\n".join(lines) + "\n"


def write_into(root: str, path: str, data: bytes, mode: int = 0o644) -> None:
    target = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as handle:
        handle.write(data)
    os.chmod(target, mode)


def symlink_into(root: str, path: str, target: str) -> None:
    link = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(target, link)


def _dkms_scripts(version: str) -> dict:
    postinst = ("#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n"
                "    dkms add -m nvidia -v %(v)s || true\n"
                "    dkms install -m nvidia -v %(v)s -k \"$(uname -r)\"\nfi\n") % {"v": version}
    prerm = "#!/bin/sh\nset -e\ndkms remove -m nvidia -v %s --all || true\n" % version
    return {"postinst": postinst, "prerm": prerm}


def build_deb(out_dir: str, name: str, deb_version: str, control: str, fill, scripts: dict | None = None) -> str:
    """`out_dir/<name>_<deb_version>_amd64.deb` built by dpkg-deb from `control`, what `fill(tree)` writes and the
    maintainer scripts; returns its path."""
    tree = tempfile.mkdtemp(prefix="deb-%s-" % name)
    try:
        os.chmod(tree, 0o755)
        os.makedirs(os.path.join(tree, "DEBIAN"))
        with open(os.path.join(tree, "DEBIAN", "control"), "w", encoding="utf-8") as handle:
            handle.write(control)
        for script, text in (scripts or {}).items():
            write_into(tree, "/DEBIAN/" + script, text.encode(), 0o755)
        fill(tree)
        path = os.path.join(out_dir, "%s_%s_amd64.deb" % (name, deb_version))
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", tree, path], check=True,
                       stdout=subprocess.DEVNULL)
        return path
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def _kernel_dkms_fill(version: str, flavor: str):
    def fill(tree: str) -> None:
        kmodbuild.write_module_sources(os.path.join(tree, "usr/src/nvidia-%s" % version), version, flavor)
        write_into(tree, "/etc/modprobe.d/nvidia-blacklists-nouveau.conf", NOUVEAU_BLACKLIST)
    return fill


def _library_fill(version: str, libraries: list):
    def fill(tree: str) -> None:
        for library in libraries:
            versioned = "%s.so.%s" % (library, version)
            write_into(tree, "%s/%s" % (installer.LIB_DIR, versioned), ("gpulab stub of %s\n" % versioned).encode(),
                   0o755)
            symlink_into(tree, "%s/%s.so.1" % (installer.LIB_DIR, library), versioned)
    return fill


def _smi_fill(version: str):
    def fill(tree: str) -> None:
        write_into(tree, "/usr/bin/nvidia-smi", installer.smi_program(version).encode(), 0o755)
    return fill


def _firmware_fill(version: str):
    def fill(tree: str) -> None:
        for firmware in installer.GSP_FIRMWARE:
            write_into(tree, "/lib/firmware/nvidia/%s/%s" % (version, firmware), ("gpulab GSP %s\n" % version).encode())
    return fill


def build_packages(out_dir: str, version: str) -> list:
    """The .deb files of one driver version; returns their paths."""
    exact = "(= %s-%s)" % (version, DEB_REVISION)
    dkms_extra = "Provides: nvidia-kernel-dkms-any %s\nConflicts: nvidia-kernel-dkms-any" % exact
    specs = [
        ("nvidia-kernel-dkms", _control("nvidia-kernel-dkms", version, "NVIDIA kernel module (proprietary), dkms",
                                        "dkms", dkms_extra), _kernel_dkms_fill(version, "proprietary"), True),
        ("nvidia-kernel-open-dkms", _control("nvidia-kernel-open-dkms", version, "NVIDIA kernel module (open), dkms",
                                             "dkms", dkms_extra), _kernel_dkms_fill(version, "open"), True),
        ("libnvidia-ml1", _control("libnvidia-ml1", version, "NVIDIA Management Library (NVML)"),
         _library_fill(version, ["libnvidia-ml"]), False),
        ("libcuda1", _control("libcuda1", version, "NVIDIA CUDA driver library"),
         _library_fill(version, ["libcuda", "libnvidia-ptxjitcompiler", "libnvidia-nvvm"]), False),
        ("nvidia-smi", _control("nvidia-smi", version, "NVIDIA System Management Interface", "libnvidia-ml1 " + exact),
         _smi_fill(version), False),
        ("firmware-nvidia-gsp", _control("firmware-nvidia-gsp", version, "NVIDIA GSP firmware"),
         _firmware_fill(version), False),
        ("nvidia-driver", _control("nvidia-driver", version, "NVIDIA driver metapackage",
                                   "nvidia-kernel-dkms-any %s, nvidia-smi %s, libcuda1 %s, firmware-nvidia-gsp %s"
                                   % (exact, exact, exact, exact)), lambda tree: None, False),
    ]
    os.makedirs(out_dir, exist_ok=True)
    return [build_deb(out_dir, name, "%s-%s" % (version, DEB_REVISION), control, fill,
                      _dkms_scripts(version) if with_dkms else None)
            for name, control, fill, with_dkms in specs]


def release_text(packages_index: bytes, label: str = "gpulab NVIDIA stub driver") -> str:
    """A flat repository's `Release` (apt wants one even with `[trusted=yes]`)."""
    size = len(packages_index)
    return ("Origin: gpulab\nLabel: %s\nArchitectures: amd64\nDate: %s\n"
            "MD5Sum:\n %s %d Packages\nSHA256:\n %s %d Packages\n" % (
                label, datetime.datetime.utcnow().strftime("%a, %d %b %Y %H:%M:%S UTC"),
                hashlib.md5(packages_index).hexdigest(), size, hashlib.sha256(packages_index).hexdigest(), size))


def index_flat_repo(repo_dir: str, label: str = "gpulab NVIDIA stub driver") -> None:
    """`Packages` (dpkg-scanpackages, every version kept) and `Release` of the .deb files in `repo_dir`."""
    index = subprocess.run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=repo_dir, check=True,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
    with open(os.path.join(repo_dir, "Packages"), "wb") as handle:
        handle.write(index)
    with open(os.path.join(repo_dir, "Release"), "w", encoding="utf-8") as handle:
        handle.write(release_text(index, label))


def build_repo(repo_dir: str, versions: list) -> dict:
    """A flat apt repository with the packages of every version; returns {"dir", "debs", "source_line"}."""
    debs = []
    for version in versions:
        debs += build_packages(repo_dir, version)
    index_flat_repo(repo_dir)
    return {"dir": repo_dir, "debs": debs, "source_line": source_line()}
