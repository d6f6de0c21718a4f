"""The fake NVIDIA layer of the GPU node twin.

Hardware profiles (`profiles`), the fake `nvidia-smi` (`smi`), the EFI/MOK state and fake `mokutil` (`mok`), the
kernel log and `lsmod` views (`kmsg`), the stub kernel modules (templates in `kmod/`, build and signing in
`kmodbuild`), the driver installer behind the fake `NVIDIA-Linux-x86_64-<ver>.run` (`installer`, `runfile`), local
apt packages (`debs`), the NVIDIA Container Toolkit's packages (`toolkit_debs`) with the fake `nvidia-ctk` (`ctk`),
the signed mirror of NVIDIA's package repositories (`nvrepos`) and the boot decision (`boot`). The API the node core
uses is described in `lab/ARCHITECTURE.md`, section "NVIDIA layer API".

`smi`, `mok`, `kmsg`, `kmodbuild` and `installer` only use the standard library and import nothing from `gpulab`
(but `installer` -> `kmodbuild`, which the runfile inlines): the runfile embeds their source so the installed
tools work inside a node without the lab on `sys.path`.
"""

# Where the node core installs the entry scripts of `bin/` inside each node (nvidia-smi is not among them: the
# driver installer puts it in /usr/bin, so a node without a driver has none, as a real host).
FAKE_BINARY_PATHS = {"mokutil": ["/usr/bin/mokutil"], "dmesg": ["/usr/bin/dmesg"], "lsmod": ["/usr/sbin/lsmod"]}
