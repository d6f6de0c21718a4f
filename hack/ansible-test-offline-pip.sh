#!/usr/bin/env bash
# ansible-test bootstraps pip in each venv it creates with a get-pip.py downloaded from the internet.
# Air-gapped machines (and ours: only package registries are reachable) cannot fetch it, but ansible-test
# accepts a script pre-placed in its cache. This stand-in bootstraps pip from the interpreter's own
# ensurepip and then installs what ansible-test asked for from the configured package index.
set -euo pipefail

cache_dir="${HOME}/.ansible/test/cache"
ca_bundle="${GPUOPS_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
mkdir -p "${cache_dir}"

# 24_2: ansible-core 2.18/2.19; 25_2: ansible-core 2.20/2.21.
for version in 24_2 25_2; do
    target="${cache_dir}/get_pip_${version}.py"
    if [ -f "${target}" ] && ! grep -q 'gpuops stand-in' "${target}"; then
        continue  # a real get-pip.py someone placed there: keep it
    fi
    cat >"${target}" <<PY
"""gpuops stand-in for get-pip.py: ensurepip, then pip install of the requested packages."""
import os
import subprocess
import sys

GET_PIP_ONLY_OPTIONS = ("--no-setuptools", "--no-wheel")
args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_OPTIONS]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
cert = ["--cert", "${ca_bundle}"] if os.path.exists("${ca_bundle}") else []
subprocess.check_call([sys.executable, "-m", "pip", "install"] + cert + args)
PY
done
echo "ansible-test pip bootstrap stand-ins are in ${cache_dir}"
