"""The stub driver as NVIDIA's CUDA repository for Ubuntu (`compute/cuda/repos/ubuntu2204/x86_64/`) publishes it.

Up to branch 580 NVIDIA's names there carry the branch; from branch 590 they lose it (NVIDIA's driver installation
guide, "Ubuntu 590 and later packages": "renamed by removing the branch designation", e.g. `nvidia-dkms-580-open`
-> `nvidia-dkms-open`). Every package of a release has one version, `<driver version>-<revision>`: `0ubuntu1` as
NVIDIA published 570 (`570.124.06-0ubuntu1`), `1ubuntu1` as it publishes 590 and later (`610.43.02-1ubuntu1`,
`615.71.09-1ubuntu1`), so an inventory pins a release with `<name>=<version>-*`:

    nvidia-driver-<branch>-open   metapackage, open kernel modules     nvidia-driver-<branch>   proprietary modules
    nvidia-dkms-<branch>-open     module sources, registered with dkms nvidia-dkms-<branch>     (proprietary)
    nvidia-utils-<branch>         nvidia-smi                           libnvidia-compute-<branch>  NVML, libcuda
    nvidia-kernel-common-<branch> the GSP firmware and the nouveau blacklist
    (590 and later: the same names without `-<branch>`: nvidia-driver-open, nvidia-dkms-open, nvidia-utils, ...)

Every dependency between them is exact (`(= <version>-<revision>)`), so apt installs, upgrades or downgrades a
whole release or nothing. The payloads are the runfile path's (`installer`, `kmodbuild`): the same stub driver, the
postinst of the dkms package builds the module with the node's real `dkms` (and signs it where the node's DKMS is
set up to sign, `/var/lib/shim-signed/mok/` on Ubuntu). Built with the real `dpkg-deb`; `debs.index_flat_repo`
indexes them; `build_cuda_repo` lays them out and signs them as NVIDIA's mirror tree does
(`compute/cuda/repos/ubuntu2204/x86_64/` with its `Release`, `InRelease`, `Release.gpg` and the repository key file).
"""
from __future__ import annotations

import os

from gpulab.nvidia import debs

UNVERSIONED_FROM_BRANCH = 590
CUDA_REPO_DIR = "compute/cuda/repos/ubuntu2204/x86_64"
CUDA_KEY_NAME = "3bf863cc.pub"


def branch_of(version: str) -> str:
    return version.split(".")[0]


def unversioned(version: str) -> bool:
    return int(branch_of(version)) >= UNVERSIONED_FROM_BRANCH


def deb_version(version: str) -> str:
    return "%s-%s" % (version, "1ubuntu1" if unversioned(version) else "0ubuntu1")


def _name(base: str, version: str, suffix: str = "") -> str:
    """``nvidia-dkms`` + ``-open`` -> nvidia-dkms-570-open (branch 570) or nvidia-dkms-open (590 and later)."""
    return base + suffix if unversioned(version) else "%s-%s%s" % (base, branch_of(version), suffix)


def package_names(version: str) -> dict:
    """{"open": [...], "proprietary": [...]}: what the role installs per flavour (the metapackage first)."""
    common = [_name("nvidia-utils", version), _name("libnvidia-compute", version),
              _name("nvidia-kernel-common", version)]
    return {"open": [_name("nvidia-driver", version, "-open"), _name("nvidia-dkms", version, "-open")] + common,
            "proprietary": [_name("nvidia-driver", version), _name("nvidia-dkms", version)] + common}


def _control(name: str, version: str, description: str, depends: str = "", extra: str = "") -> str:
    lines = ["Package: %s" % name, "Version: %s" % deb_version(version), "Architecture: amd64",
             "Maintainer: gpulab <gpulab@localhost>", "Section: restricted/libs", "Priority: optional",
             "Source: nvidia-graphics-drivers-%s" % branch_of(version)]
    if depends:
        lines.append("Depends: %s" % depends)
    if extra:
        lines.append(extra)
    lines.append("Description: %s (gpulab stub of NVIDIA driver %s)" % (description, version))
    return "\n".join(lines) + "\n"


def _common_fill(version: str):
    firmware = debs._firmware_fill(version)

    def fill(tree: str) -> None:
        firmware(tree)
        debs.write_into(tree, "/lib/modprobe.d/nvidia-kernel-common.conf", debs.NOUVEAU_BLACKLIST)
    return fill


def build_packages(out_dir: str, version: str) -> list:
    """The .deb files of one driver release; returns their paths."""
    exact = "(= %s)" % deb_version(version)
    dkms_extra = "Provides: nvidia-dkms-kernel\nConflicts: nvidia-dkms-kernel"
    utils, compute, common = (_name("nvidia-utils", version), _name("libnvidia-compute", version),
                              _name("nvidia-kernel-common", version))
    specs = []
    for flavor, suffix in (("open", "-open"), ("proprietary", "")):
        dkms = _name("nvidia-dkms", version, suffix)
        specs.append((dkms, _control(dkms, version, "NVIDIA kernel module sources (%s), dkms" % flavor,
                                     "dkms, %s %s" % (common, exact), dkms_extra),
                      debs._kernel_dkms_fill(version, flavor), True))
        meta = _name("nvidia-driver", version, suffix)
        specs.append((meta, _control(meta, version, "NVIDIA driver metapackage (%s kernel modules)" % flavor,
                                     ", ".join("%s %s" % (name, exact) for name in (dkms, utils, compute, common))),
                      lambda tree: None, False))
    specs += [
        (utils, _control(utils, version, "NVIDIA driver support binaries (nvidia-smi)", "%s %s" % (compute, exact)),
         debs._smi_fill(version), False),
        (compute, _control(compute, version, "NVIDIA libcompute package (NVML, libcuda)"),
         debs._library_fill(version, ["libnvidia-ml", "libcuda", "libnvidia-ptxjitcompiler", "libnvidia-nvvm"]),
         False),
        (common, _control(common, version, "Shared files used with the kernel module (GSP firmware)"),
         _common_fill(version), False),
    ]
    os.makedirs(out_dir, exist_ok=True)
    return [debs.build_deb(out_dir, name, deb_version(version), control, fill,
                           debs._dkms_scripts(version) if with_dkms else None)
            for name, control, fill, with_dkms in specs]


def build_repo(repo_dir: str, versions: list) -> dict:
    """A flat apt repository (NVIDIA's CUDA repositories are flat: `deb [signed-by=...] <url> /`) with every
    release in `versions`; returns {"dir", "debs"}."""
    paths = []
    for version in versions:
        paths += build_packages(repo_dir, version)
    debs.index_flat_repo(repo_dir, "gpulab NVIDIA CUDA repository (ubuntu2204) stub")
    return {"dir": repo_dir, "debs": paths}


def build_cuda_repo(mirror_dir: str, key, versions: list) -> dict:
    """NVIDIA's CUDA repository for Ubuntu 22.04 under `mirror_dir`, signed with `key` (an `nvrepos.SigningKey`),
    its public key beside the packages as NVIDIA publishes it; returns {"dir", "debs", "key"}. A node uses it with
    `deb [signed-by=<the key, dearmored>] <url>/compute/cuda/repos/ubuntu2204/x86_64/ /`."""
    repo = build_repo(os.path.join(mirror_dir, CUDA_REPO_DIR), versions)
    key.sign_flat_repo(repo["dir"])
    repo["key"] = os.path.join(repo["dir"], CUDA_KEY_NAME)
    key.export(repo["key"])
    return repo
