#!/usr/bin/env bash
# `make test-matrix`: the modules' unit tests and one twin smoke run of the diagnose runbook on the ends of the
# ansible-core range the collection claims (meta/runtime.yml, requirements.txt), each in its own venv
# (.venv-ac<version>, pinned by hack/matrix/ansible-core-<version>.txt).
#   usage: hack/test-matrix.sh TREE CELL...    (CELL = <ansible-core minor>:<python X.Y>, e.g. 2.16:3.11)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree="$1"
shift
collection_dir="${tree}/ansible_collections/gpuops/nvidia"
# The runbooks use kubernetes.core (6.2 claims ansible-core >=2.16); the matrix venvs hold ansible-core alone, so
# they borrow the copy the `ansible` package put into the main venv.
dependencies_path=$("${repo}/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
summary=()

for cell in "$@"; do
    core="${cell%%:*}"
    python_version="${cell##*:}"
    venv="${repo}/.venv-ac${core}"
    pins="${repo}/hack/matrix/ansible-core-${core}.txt"
    started=${SECONDS}
    if ! python=$("${repo}/hack/find-python.sh" "${python_version}"); then
        echo "python${python_version} not found (PATH or pyenv): install it to test ansible-core ${core}" >&2
        exit 1
    fi
    if [ ! -f "${venv}/.installed" ] || [ "${pins}" -nt "${venv}/.installed" ]; then
        rm -rf "${venv}"
        "${python}" -m venv "${venv}"
        "${venv}/bin/pip" install --quiet --disable-pip-version-check -r "${pins}"
        touch "${venv}/.installed"
    fi
    versions="ansible-core $("${venv}/bin/python" -c 'from ansible.release import __version__; print(__version__)')"
    versions+=" on Python $("${venv}/bin/python" -c 'import platform; print(platform.python_version())')"
    echo "=== test-matrix: ${versions}: unit tests, then the diagnose runbook over the twin"
    (cd "${collection_dir}" && "${venv}/bin/ansible-test" units --color no --python "${python_version}")
    PYTHONPATH="${repo}/lab" ANSIBLE_COLLECTIONS_PATH="${tree}:${dependencies_path}" PATH="${venv}/bin:${PATH}" \
        "${venv}/bin/python" -m pytest -q -p no:cacheprovider "${repo}/lab/tests/test_collection_diagnose_playbook.py"
    summary+=("${versions}: passed in $((SECONDS - started)) s")
done

echo "=== test-matrix summary"
printf '  %s\n' "${summary[@]}"
