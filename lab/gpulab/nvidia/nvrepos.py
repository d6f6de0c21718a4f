"""A loopback mirror of NVIDIA's package repositories, laid out and signed as NVIDIA publishes them, so the
collection's roles install NVIDIA's packages by their real names from a mirror, as an air-gapped site does.

Tree (served from `DIR/nvidia-repos` on `127.0.0.1:<ephemeral>`; unknown paths answer 404):

    libnvidia-container/gpgkey                          the repository's public key (ASCII-armoured)
    libnvidia-container/stable/deb/amd64/               flat apt repository (`deb [signed-by=...] <url> /`):
        *.deb  Packages  Release  InRelease  Release.gpg    the toolkit's packages (`toolkit_debs`), signed
    libnvidia-container/stable/rpm/x86_64/              dnf repository (`baseurl=<url>/stable/rpm/$basearch`):
        *.rpm  repodata/repomd.xml(.asc)                    the same packages as signed rpms (`rpms`)
    rocky/9/BaseOS/x86_64/os/, rocky/RPM-GPG-KEY-Rocky-9    what Rocky 9 nodes' own repository must offer
    epel/9/Everything/x86_64/, epel/RPM-GPG-KEY-EPEL-9      EPEL's dkms, only with `driver_versions`
    compute/cuda/repos/ubuntu2204/x86_64/, .../rhel9/x86_64/  NVIDIA's CUDA repositories with the stub driver's
        packages (`ubuntu_driver_debs`, `rocky_driver_rpms`), only when PackageMirror gets `driver_versions`

The key is the mirror's own (a fresh ed25519 key per `up`, made with the real `gpg`), not NVIDIA's: apt and dnf
check the signatures against the key the role fetched from `gpgkey`, exactly as against NVIDIA's. The rpm part needs
`rpmbuild`/`rpmsign` (Debian's `rpm`) and `createrepo_c`; without them the mirror has the apt part only.
`inventory_vars()` are the role defaults an air-gapped inventory sets (`container_runtime_toolkit_repo_base_url`,
`_key_url`).
"""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import tempfile
import threading

from gpulab.nvidia import debs, installer, rocky_driver_rpms, rpms, toolkit_debs, ubuntu_driver_debs

TOOLKIT_VERSIONS = ("1.17.8",)
TOOLKIT_TREE = "libnvidia-container"
TOOLKIT_CHANNEL_DIR = "stable/deb/amd64"
TOOLKIT_RPM_DIR = "stable/rpm/x86_64"
ROCKY_BASEOS_DIR = "rocky/9/BaseOS/x86_64/os"
ROCKY_KEY_PATH = "rocky/RPM-GPG-KEY-Rocky-9"
EPEL_DIR = "epel/9/Everything/x86_64"
EPEL_KEY_PATH = "epel/RPM-GPG-KEY-EPEL-9"
KEY_UID = "gpulab NVIDIA repository mirror <gpulab@localhost>"


class SigningKey:
    """A fresh ed25519 signing key in a private GnuPG home (the real `gpg`), removed by close()."""

    def __init__(self):
        self.home = tempfile.mkdtemp(prefix="gpulab-gnupg-")
        self.gpg("--passphrase", "", "--quick-gen-key", KEY_UID, "ed25519", "sign", "never")

    def gpg(self, *args: str, output: str | None = None) -> None:
        argv = ["gpg", "--homedir", self.home, "--batch", "--yes", "--quiet"] + (["--output", output] if output else [])
        subprocess.run(argv + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def export(self, key_path: str) -> None:
        """The public key, ASCII-armoured (as NVIDIA publishes `gpgkey` and Rocky its RPM-GPG-KEY files)."""
        os.makedirs(os.path.dirname(key_path), exist_ok=True)
        self.gpg("--armor", "--export", KEY_UID, output=key_path)

    def sign_flat_repo(self, repo_dir: str) -> None:
        """`InRelease` and `Release.gpg` of an apt repository's `Release`."""
        release = os.path.join(repo_dir, "Release")
        self.gpg("--clearsign", release, output=os.path.join(repo_dir, "InRelease"))
        self.gpg("--armor", "--detach-sign", release, output=os.path.join(repo_dir, "Release.gpg"))

    def sign_rpms(self, paths: list) -> None:
        subprocess.run(["rpmsign", "--addsign", "--define", "__gpg %s" % shutil.which("gpg"),
                        "--define", "_gpg_name %s" % KEY_UID,
                        "--define", "_gpg_path %s" % self.home] + list(paths),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def sign_repomd(self, repomd_path: str) -> None:
        """`repomd.xml.asc`, what dnf checks with `repo_gpgcheck`."""
        self.gpg("--armor", "--detach-sign", repomd_path, output=repomd_path + ".asc")

    def close(self) -> None:
        subprocess.run(["gpgconf", "--homedir", self.home, "--kill", "gpg-agent"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.home, ignore_errors=True)


def sign_flat_repo(repo_dir: str, key_path: str) -> None:
    """`InRelease` and `Release.gpg` of `repo_dir/Release` with a new key whose public half goes to `key_path`."""
    key = SigningKey()
    try:
        key.export(key_path)
        key.sign_flat_repo(repo_dir)
    finally:
        key.close()


def build_toolkit_repos(mirror_dir: str, key: SigningKey, versions=TOOLKIT_VERSIONS) -> dict:
    """NVIDIA's libnvidia-container apt and dnf repositories under `mirror_dir`, signed with `key`;
    returns {"deb_dir", "rpm_dir", "key"}."""
    tree = os.path.join(mirror_dir, TOOLKIT_TREE)
    deb_dir = os.path.join(tree, TOOLKIT_CHANNEL_DIR)
    os.makedirs(deb_dir, exist_ok=True)
    for version in versions:
        toolkit_debs.build_packages(deb_dir, version)
    debs.index_flat_repo(deb_dir, label="gpulab mirror of NVIDIA's libnvidia-container")
    key.sign_flat_repo(deb_dir)
    key_path = os.path.join(tree, "gpgkey")
    key.export(key_path)
    result = {"deb_dir": deb_dir, "rpm_dir": None, "key": key_path}
    if shutil.which("rpmbuild") and shutil.which("createrepo_c"):
        rpm_dir = os.path.join(tree, TOOLKIT_RPM_DIR)
        built = [path for version in versions for path in rpms.build_toolkit_rpms(rpm_dir, version)]
        key.sign_rpms(built)
        key.sign_repomd(rpms.index_repo(rpm_dir))
        result["rpm_dir"] = rpm_dir
    return result


def build_rocky_baseos(mirror_dir: str, key: SigningKey) -> str | None:
    """The part of Rocky 9 BaseOS the roles install (`rpms.build_versionlock_plugin_rpm`, `build_bash_rpm`,
    `build_kernel_devel_rpms` of the running kernel when the host has Debian headers to lend it), with Rocky's layout
    (`rocky/9/BaseOS/x86_64/os/`) and key file (`rocky/RPM-GPG-KEY-Rocky-9`); None without the rpm tools."""
    if not (shutil.which("rpmbuild") and shutil.which("createrepo_c")):
        return None
    repo_dir = os.path.join(mirror_dir, ROCKY_BASEOS_DIR)
    built = [rpms.build_versionlock_plugin_rpm(repo_dir), rpms.build_bash_rpm(repo_dir)]
    try:
        # the running kernel's kernel-devel/kernel-headers (what the nvidia_driver role installs when headers miss)
        built += rpms.build_kernel_devel_rpms(repo_dir, os.uname().release, installer.debian_headers_dir())
    except installer.InstallerError:
        pass   # the host has no linux-headers-*: nothing to build the modules with, so no kernel-devel either
    key.sign_rpms(built)
    key.sign_repomd(rpms.index_repo(repo_dir))
    key.export(os.path.join(mirror_dir, ROCKY_KEY_PATH))
    return repo_dir


def build_epel(mirror_dir: str, key: SigningKey) -> str | None:
    """The part of EPEL 9 that NVIDIA's rhel9 driver packages need (`dkms`, `rpms.build_dkms_rpm`), with EPEL's
    layout (`epel/9/Everything/x86_64/`) and key file (`epel/RPM-GPG-KEY-EPEL-9`); None without the rpm tools."""
    if not (shutil.which("rpmbuild") and shutil.which("createrepo_c")):
        return None
    repo_dir = os.path.join(mirror_dir, EPEL_DIR)
    key.sign_rpms([rpms.build_dkms_rpm(repo_dir)])
    key.sign_repomd(rpms.index_repo(repo_dir))
    key.export(os.path.join(mirror_dir, EPEL_KEY_PATH))
    return repo_dir


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class PackageMirror:
    """Builds the repositories into `mirror_dir` and serves them on 127.0.0.1 (an ephemeral port) until stop()."""

    def __init__(self, mirror_dir: str, toolkit_versions=TOOLKIT_VERSIONS, host: str = "127.0.0.1",
                 driver_versions=()):
        key = SigningKey()
        self.cuda = {}
        self.epel = None
        try:
            self.toolkit = build_toolkit_repos(mirror_dir, key, toolkit_versions)
            self.rocky_baseos = build_rocky_baseos(mirror_dir, key)
            if driver_versions:
                self.cuda["ubuntu2204"] = ubuntu_driver_debs.build_cuda_repo(mirror_dir, key, list(driver_versions))
                if shutil.which("rpmbuild") and shutil.which("createrepo_c") and shutil.which("modifyrepo_c"):
                    self.cuda["rhel9"] = rocky_driver_rpms.build_cuda_repo(mirror_dir, key, list(driver_versions))
                    self.epel = build_epel(mirror_dir, key)
        finally:
            key.close()
        self.mirror_dir = mirror_dir
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

    def rocky_repo(self) -> dict | None:
        """What a Rocky 9 node's `/etc/yum.repos.d/rocky.repo` points at: {"baseurl", "key"} (the key's text, for
        `/etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9`); None when the mirror has no BaseOS."""
        if not self.rocky_baseos:
            return None
        with open(os.path.join(self.mirror_dir, ROCKY_KEY_PATH), encoding="utf-8") as handle:
            key = handle.read()
        return {"baseurl": "%s/rocky/$releasever/BaseOS/$basearch/os/" % self.url, "key": key}

    def epel_repo(self) -> dict | None:
        """Where a Rocky 9 node's EPEL is ({"baseurl", "key_url"}; the twin's stand-in, with `driver_versions`)."""
        if not self.epel:
            return None
        return {"baseurl": "%s/%s/" % (self.url, EPEL_DIR), "key_url": "%s/%s" % (self.url, EPEL_KEY_PATH)}

    def cuda_repos(self) -> dict:
        """{"ubuntu2204"|"rhel9": {"url", "key_url"}}: NVIDIA's CUDA repositories served here (empty without
        `driver_versions`)."""
        result = {}
        for name, repo in self.cuda.items():
            path = os.path.relpath(repo["dir"], self.mirror_dir)
            result[name] = {"url": "%s/%s/" % (self.url, path),
                            "key_url": "%s/%s/%s" % (self.url, path, os.path.basename(repo["key"]))}
        return result

    def inventory_vars(self) -> dict:
        """What the inventory sets so the container_runtime role installs the toolkit from here (and, with
        `driver_versions`, the nvidia_driver role's package method finds NVIDIA's CUDA repositories here)."""
        values = {"container_runtime_toolkit_repo_base_url": "%s/%s" % (self.url, TOOLKIT_TREE),
                  "container_runtime_toolkit_repo_key_url": "%s/%s/gpgkey" % (self.url, TOOLKIT_TREE)}
        if self.cuda:
            values["nvidia_driver_cuda_repo_base_url"] = "%s/compute/cuda/repos" % self.url
        return values
