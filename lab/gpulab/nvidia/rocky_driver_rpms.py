"""The stub driver as NVIDIA's CUDA repository for RHEL 9 / Rocky 9 (`compute/cuda/repos/rhel9/x86_64/`) publishes
it: rpms `nvidia-driver`, `nvidia-driver-libs`, `nvidia-driver-cuda`, `nvidia-driver-cuda-libs`, `nvidia-kmod-common`,
`nvidia-persistenced` (no daemon in the stub) and the DKMS kernel-module packages `kmod-nvidia-open-dkms` /
`kmod-nvidia-latest-dkms` (epoch 3, `<version>-1.el9`), grouped by modular metadata (`modules.yaml`) into the
`nvidia-driver` module's streams: `<branch>-open` and `<branch>-dkms` per branch, so a node chooses a branch and
flavour with `dnf module enable nvidia-driver:<stream>`. Payloads are the runfile path's stub driver (`debs` fills);
the dkms packages' scriptlets register the module with the node's real `dkms` (`dkms_scripts`). Built with the real
`rpmbuild`, indexed with `createrepo_c` and `modifyrepo_c`.
"""
from __future__ import annotations

import os
import subprocess

from gpulab.nvidia import debs, rpms

RELEASE = "1.el9"
EPOCH = "3"
CUDA_REPO_DIR = "compute/cuda/repos/rhel9/x86_64"
CUDA_KEY_NAME = "D42D0685.pub"


def branch_of(version: str) -> str:
    return version.split(".")[0]


def package_specs(version: str) -> list:
    """[(name, summary, requires, fill)] of one release."""
    exact = "= %s:%s-%s" % (EPOCH, version, RELEASE)
    return [
        ("nvidia-driver", "NVIDIA's proprietary display driver for NVIDIA graphic cards",
         ["nvidia-driver-libs %s" % exact, "nvidia-kmod-common %s" % exact], debs._firmware_fill(version)),
        ("nvidia-driver-libs", "Libraries for nvidia-driver", [], lambda tree: None),
        ("nvidia-driver-cuda", "CUDA integration for nvidia-driver (nvidia-smi)",
         ["nvidia-driver-cuda-libs %s" % exact], debs._smi_fill(version)),
        ("nvidia-driver-cuda-libs", "Libraries for nvidia-driver-cuda (NVML, libcuda)", [],
         debs._library_fill(version, ["libnvidia-ml", "libcuda", "libnvidia-ptxjitcompiler", "libnvidia-nvvm"])),
        ("nvidia-kmod-common", "Common file for NVIDIA's proprietary driver kernel modules", [],
         lambda tree: debs.write_into(tree, "/usr/lib/modprobe.d/nvidia.conf", debs.NOUVEAU_BLACKLIST)),
        ("kmod-nvidia-open-dkms", "NVIDIA display driver kernel module (open), DKMS",
         ["dkms", "nvidia-kmod-common %s" % exact], debs._kernel_dkms_fill(version, "open")),
        ("kmod-nvidia-latest-dkms", "NVIDIA display driver kernel module (proprietary), DKMS",
         ["dkms", "nvidia-kmod-common %s" % exact], debs._kernel_dkms_fill(version, "proprietary")),
        ("nvidia-persistenced", "A daemon to maintain persistent software state in the NVIDIA driver", [],
         lambda tree: None),
    ]


def stream_packages(version: str) -> dict:
    """{stream: [package names]}: what each of the release's module streams holds."""
    common = ["nvidia-driver", "nvidia-driver-libs", "nvidia-driver-cuda", "nvidia-driver-cuda-libs",
              "nvidia-kmod-common", "nvidia-persistenced"]
    branch = branch_of(version)
    return {"%s-open" % branch: common + ["kmod-nvidia-open-dkms"],
            "%s-dkms" % branch: common + ["kmod-nvidia-latest-dkms"]}


def dkms_scripts(version: str) -> dict:
    """The kmod-nvidia-*-dkms scriptlets: %post registers and builds this release's module with the node's real
    dkms (first removing another release's, since rpm runs the new package's %post before the old one's %preun on
    an upgrade or a downgrade); %preun removes it only when the package is erased ($1 = 0)."""
    post = ("for old in $(ls /var/lib/dkms/nvidia 2>/dev/null); do\n"
            "    case \"$old\" in %(v)s|[!0-9]*) ;; *) dkms remove -m nvidia -v \"$old\" --all || true ;; esac\n"
            "done\n"
            "dkms add -m nvidia -v %(v)s || true\n"
            "dkms install -m nvidia -v %(v)s -k \"$(uname -r)\"") % {"v": version}
    preun = "if [ \"$1\" = 0 ]; then dkms remove -m nvidia -v %s --all || true; fi" % version
    return {"post": post, "preun": preun}


def build_rpms(out_dir: str, version: str) -> list:
    return [rpms.build_rpm(out_dir, name, version, RELEASE, summary, requires, fill, epoch=EPOCH,
                           scripts=dkms_scripts(version) if name.endswith("-dkms") else None)
            for name, summary, requires, fill in package_specs(version)]


def modules_yaml(versions: list) -> str:
    """modulemd v2 documents: one per (stream, release), the artifacts as NEVRAs."""
    documents = []
    for index, version in enumerate(versions):
        for stream, names in stream_packages(version).items():
            rpms_list = "".join("    - %s-%s:%s-%s.x86_64\n" % (name, EPOCH, version, RELEASE) for name in names)
            components = "".join("      %s:\n        rationale: driver part\n" % name for name in names)
            profile = "".join("        - %s\n" % name for name in names)
            documents.append(
                "---\ndocument: modulemd\nversion: 2\ndata:\n  name: nvidia-driver\n  stream: \"%s\"\n"
                "  version: %d\n  context: \"00000000\"\n  arch: x86_64\n  summary: Nvidia driver for %s branch\n"
                "  description: >-\n    The NVIDIA driver %s (gpulab stub)\n  license:\n    module:\n    - MIT\n"
                "  profiles:\n    default:\n      rpms:\n%s"
                "  components:\n    rpms:\n%s  artifacts:\n    rpms:\n%s..."
                % (stream, index + 1, stream, version, profile, components, rpms_list))
    return "\n".join(documents) + "\n"


def build_repo(repo_dir: str, versions: list) -> dict:
    """A dnf repository with the modular metadata of every release; returns {"dir", "rpms"}."""
    built = []
    for version in versions:
        built += build_rpms(repo_dir, version)
    index_repo(repo_dir, versions)
    return {"dir": repo_dir, "rpms": built}


def index_repo(repo_dir: str, versions: list) -> str:
    """`repodata/` of the rpms in `repo_dir` with the module streams of `versions`; returns `repomd.xml`'s path."""
    repomd = rpms.index_repo(repo_dir)
    path = os.path.join(repo_dir, "modules.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(modules_yaml(versions))
    subprocess.run(["modifyrepo_c", "--mdtype=modules", path, os.path.join(repo_dir, "repodata")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.remove(path)
    return repomd


def build_cuda_repo(mirror_dir: str, key, versions: list) -> dict:
    """NVIDIA's CUDA repository for RHEL 9 under `mirror_dir`: rpms and `repomd.xml` signed with `key` (an
    `nvrepos.SigningKey`), its public key beside them as NVIDIA publishes it; returns {"dir", "rpms", "key"}."""
    repo_dir = os.path.join(mirror_dir, CUDA_REPO_DIR)
    built = []
    for version in versions:
        built += build_rpms(repo_dir, version)
    key.sign_rpms(built)
    key.sign_repomd(index_repo(repo_dir, versions))
    repo = {"dir": repo_dir, "rpms": built, "key": os.path.join(repo_dir, CUDA_KEY_NAME)}
    key.export(repo["key"])
    return repo
