"""The container runtime a node twin runs (`gpulab up --containerd 1.6|1.7|2.1`): Debian's own containerd packages.

Every node is an overlay of the Debian 12 host, so by default it runs the host's containerd 1.6 (no CDI). For
`--containerd 1.7` the node gets Debian 13 (trixie)'s `containerd` package, for `--containerd 2.1` Debian unstable
(sid)'s: the `.deb` is fetched with `apt-get download` from Debian's archive through a private apt directory (its own
sources list, lists and cache under the deb cache, never the host's apt state) and unpacked with `dpkg-deb -x` into
the node's overlay upper dir before its first boot (the node's disk), never onto the host. Downloaded packages are
kept in `$GPULAB_DEB_CACHE` (default `/var/cache/gpulab/debs`) so later labs start offline.

Both packages depend on `runc` and `libc6 (>= 2.34)` only; the host's runc 1.1 and glibc 2.36 serve them.
"""
from __future__ import annotations

import glob
import os
import subprocess

DEFAULT_CONTAINERD = "1.6"
DEB_CACHE_ENV = "GPULAB_DEB_CACHE"
DEFAULT_DEB_CACHE = "/var/cache/gpulab/debs"
ARCHIVE = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# containerd release line -> the Debian suite whose `containerd` package is that line (None: the host's own)
CONTAINERD_SUITES = {"1.6": None, "1.7": "trixie", "2.1": "sid"}
CONTAINERD_VERSIONS = tuple(CONTAINERD_SUITES)
APT_TIMEOUT_S = 300


class PackageError(Exception):
    """A package could not be fetched or unpacked."""


def deb_cache_dir() -> str:
    return os.environ.get(DEB_CACHE_ENV) or DEFAULT_DEB_CACHE


def _apt_options(apt_dir: str) -> list:
    """apt options that keep every file apt reads or writes under ``apt_dir`` (sources, lists, cache, status)."""
    return ["-o", "Dir=%s" % apt_dir, "-o", "Dir::Etc=%s/etc" % apt_dir,
            "-o", "Dir::State=%s/state" % apt_dir, "-o", "Dir::State::status=%s/state/status" % apt_dir,
            "-o", "Dir::Cache=%s/cache" % apt_dir, "-o", "Debug::NoLocking=1",
            "-o", "APT::Architecture=amd64", "-o", "APT::Sandbox::User=root"]


def private_apt_dir(cache_dir: str, suite: str) -> str:
    """``<cache>/apt-<suite>``: an apt root whose only source is Debian's archive for ``suite``."""
    apt_dir = os.path.join(cache_dir, "apt-" + suite)
    for sub in ("etc/sources.list.d", "etc/preferences.d", "etc/apt.conf.d", "state/lists/partial",
                "cache/archives/partial"):
        os.makedirs(os.path.join(apt_dir, sub), exist_ok=True)
    with open(os.path.join(apt_dir, "etc", "sources.list"), "w", encoding="utf-8") as stream:
        stream.write("deb [signed-by=%s] %s %s main\n" % (KEYRING, ARCHIVE, suite))
    open(os.path.join(apt_dir, "state", "status"), "a").close()
    return apt_dir


def _run(argv: list, cwd: str | None = None) -> str:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PackageError("%s timed out after %ds" % (" ".join(argv[:1] + argv[-2:]), APT_TIMEOUT_S))
    if done.returncode != 0:
        raise PackageError("%s failed (exit %d): %s" % (" ".join(argv[:1] + argv[-2:]), done.returncode,
                                                       (done.stderr or done.stdout).strip()[-600:]))
    return done.stdout


def fetch_deb(package: str, suite: str, cache_dir: str | None = None) -> str:
    """The path of ``package``'s .deb from Debian ``suite``: the cached one, else downloaded with ``apt-get
    download`` through the suite's private apt directory."""
    cache_dir = cache_dir or deb_cache_dir()
    pool = os.path.join(cache_dir, suite)
    os.makedirs(pool, exist_ok=True)
    cached = sorted(glob.glob(os.path.join(pool, "%s_*_amd64.deb" % package)))
    if cached:
        return cached[-1]
    options = _apt_options(private_apt_dir(cache_dir, suite))
    _run(["apt-get"] + options + ["-q", "update"])
    _run(["apt-get"] + options + ["-q", "download", "%s/%s" % (package, suite)], cwd=pool)
    fetched = sorted(glob.glob(os.path.join(pool, "%s_*_amd64.deb" % package)))
    if not fetched:
        raise PackageError("apt-get download %s/%s left no .deb in %s" % (package, suite, pool))
    return fetched[-1]


def deb_version(path: str) -> str:
    return _run(["dpkg-deb", "--field", path, "Version"]).strip()


def containerd_deb(version: str, cache_dir: str | None = None):
    """The containerd .deb for ``version`` (None for the host's own 1.6); ValueError for an unknown version."""
    if version not in CONTAINERD_SUITES:
        raise ValueError("unknown --containerd %s (known: %s)" % (version, ", ".join(CONTAINERD_VERSIONS)))
    suite = CONTAINERD_SUITES[version]
    if not suite:
        return None
    deb = fetch_deb("containerd", suite, cache_dir)
    found = deb_version(deb)
    if not found.startswith(version + "."):
        raise PackageError("Debian %s's containerd is %s now, not %s.x (%s): keep a %s.x .deb in %s"
                           % (suite, found, version, deb, version, os.path.dirname(deb)))
    return deb


def fleet_containerd(versions: list, count: int) -> list:
    """The containerd line of each of `count` nodes: `versions` in turn (`[1.7, 2.1]` -> 1.7, 2.1, 1.7, ...)."""
    chosen = list(versions or [DEFAULT_CONTAINERD])
    unknown = [version for version in chosen if version not in CONTAINERD_SUITES]
    if unknown:
        raise ValueError("unknown --containerd %s (known: %s)" % (", ".join(unknown), ", ".join(CONTAINERD_VERSIONS)))
    return [chosen[index % len(chosen)] for index in range(count)]


def unpack_into(upper_dir: str, deb_path: str) -> None:
    """``dpkg-deb -x`` into a node's overlay upper dir: the package's files on the node's disk only."""
    _run(["dpkg-deb", "-x", deb_path, upper_dir])
