#!/usr/bin/env bash
# Print the path of a working pythonX.Y: on PATH, or installed by pyenv (whose shims answer only for the selected
# version). Fails silently when there is none.
#   usage: hack/find-python.sh 3.12
set -uo pipefail
version="$1"
for candidate in $(command -v "python${version}") \
                 $(ls -d "${PYENV_ROOT:-${HOME}/.pyenv}"/versions/"${version}".*/bin/python"${version}" 2>/dev/null); do
    if "${candidate}" -V >/dev/null 2>&1; then
        echo "${candidate}"
        exit 0
    fi
done
exit 1
