#!/usr/bin/env bash
# `make release-check`: what a user gets from the release tarball, checked from an installed copy.
#   1. ansible-galaxy collection build, and the tarball's file list: nothing that is not collection content
#      (the twin, the runner, CI and build artefacts, test output, caches) may be in it;
#   2. ansible-galaxy collection install of the tarball into an empty collections path;
#   3. ansible-doc of every module, callback, filter, test plugin and role of the installed copy (a plugin whose
#      documentation does not load, or any warning, fails);
#   4. ansible-playbook --syntax-check of every runbook by its FQCN, and of the AWX set-up in deploy/awx/;
#   5. ansible-builder create of the execution environment (build context only, no container engine).
# Offline: kubernetes.core and awx.awx come from the `ansible` package of the venv (found on sys.path).
#   usage: hack/release-check.sh [VENV_BIN]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-${repo}/.venv/bin}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-release-check.XXXXXX")
trap 'rm -rf "${work}"' EXIT
export PATH="${bin}:${PATH}" ANSIBLE_COLLECTIONS_PATH="${work}/collections" ANSIBLE_NOCOLOR=1
export ANSIBLE_LOCAL_TEMP="${work}/tmp" ANSIBLE_HOME="${work}/ansible-home"

step() { printf '=== release-check: %s\n' "$*"; }

step "build"
(cd "${repo}" && ansible-galaxy collection build --force --output-path "${work}" >/dev/null)
tarball=$(ls "${work}"/gpuops-nvidia-*.tar.gz)
tar -tzf "${tarball}" | sed 's|/$||' | sort > "${work}/files.txt"
echo "$(basename "${tarball}"): $(wc -l < "${work}/files.txt") entries, $(du -k "${tarball}" | cut -f1) KiB"
# top-level entries with their file counts: the summary of what users install
awk -F/ '{print $1}' "${work}/files.txt" | sort | uniq -c | awk '{printf "  %-22s %s\n", $2, $1}'
forbidden='^(lab|runner|hack|benchmarks|ee|\.ci|\.git|\.venv[^/]*|\.tree|lab-state|tests/output|dist|build)(/|$)|\.whl$|\.tar\.gz$|(^|/)(__pycache__|\.pytest_cache|\.ansible)(/|$)|\.pyc$|^(Makefile|requirements-dev\.txt)$'
if grep -E "${forbidden}" "${work}/files.txt"; then
    echo "release-check: the tarball holds the files above, which are not collection content" >&2
    exit 1
fi

step "version_added no later than the collection's version"
python3 - "${repo}" <<'PY'
import glob, os, re, sys
repo = sys.argv[1]
version = re.search(r"^version:\s*(\S+)", open(os.path.join(repo, "galaxy.yml")).read(), re.M).group(1)
as_tuple = lambda text: tuple(int(part) for part in text.split("."))
late = [(path, found) for path in sorted(glob.glob(os.path.join(repo, "plugins", "*", "*.py")))
        for found in re.findall(r"^\s*version_added:\s*['\"]?([0-9.]+)", open(path).read(), re.M)
        if as_tuple(found) > as_tuple(version)]
for path, found in late:
    print("release-check: %s says version_added %s, after the collection's %s" % (os.path.relpath(path, repo), found, version), file=sys.stderr)
sys.exit(1 if late else 0)
PY

step "install into an empty collections path"
ansible-galaxy collection install --no-deps -p "${ANSIBLE_COLLECTIONS_PATH}" "${tarball}" >/dev/null
installed="${ANSIBLE_COLLECTIONS_PATH}/ansible_collections/gpuops/nvidia"
ansible-galaxy collection list gpuops.nvidia 2>/dev/null | grep -q "^gpuops.nvidia " \
    || { echo "release-check: the installed collection is not found in ${ANSIBLE_COLLECTIONS_PATH}" >&2; exit 1; }

names() {   # FQCNs of the plugin files in a folder of the installed copy (private helpers start with _)
    local folder="$1" file
    for file in "${installed}/${folder}"/*.py "${installed}/${folder}"/*.yml; do
        [[ -e "${file}" ]] || continue
        file=$(basename "${file}")
        [[ "${file}" == _* || "${file}" == __init__.py ]] && continue
        echo "gpuops.nvidia.${file%.*}"
    done
}

doc_check() {   # ansible-doc TYPE NAME...: every name documented, no warning
    local type="$1"
    shift
    [[ $# -gt 0 ]] || return 0
    if ! ansible-doc -t "${type}" "$@" > "${work}/doc.txt" 2> "${work}/doc.err" || [[ -s "${work}/doc.err" ]]; then
        cat "${work}/doc.err" >&2
        echo "release-check: ansible-doc -t ${type} failed or warned" >&2
        exit 1
    fi
    local name
    for name in "$@"; do
        # "> MODULE gpuops.nvidia.x (PATH)" or "> ROLE: *gpuops.nvidia.x* (PATH)": documented, from the installed copy
        grep -qF -e " ${name} (${installed}" -e "*${name}* (${installed}" "${work}/doc.txt" \
            || { echo "release-check: ansible-doc -t ${type} did not document ${name} from ${installed}" >&2; exit 1; }
    done
    echo "ansible-doc -t ${type}: $# documented ($*)" | sed "s/gpuops\.nvidia\.//g"
}

step "ansible-doc of every plugin and role"
mapfile -t modules < <(names plugins/modules)
mapfile -t callbacks < <(names plugins/callback)
mapfile -t filters < <(names plugins/filter)
mapfile -t tests < <(names plugins/test)
mapfile -t roles < <(for role in "${installed}"/roles/*/; do echo "gpuops.nvidia.$(basename "${role}")"; done)
doc_check module "${modules[@]}"
doc_check callback "${callbacks[@]}"
doc_check filter "${filters[@]}"
doc_check test "${tests[@]}"
doc_check role "${roles[@]}"

step "syntax check of every runbook by FQCN, and of deploy/awx"
mapfile -t playbooks < <(names playbooks)
ansible-playbook --syntax-check "${playbooks[@]}" 2> "${work}/syntax.err" >/dev/null \
    || { cat "${work}/syntax.err" >&2; exit 1; }
echo "ansible-playbook --syntax-check: ${#playbooks[@]} runbooks (${playbooks[*]})" | sed "s/gpuops\.nvidia\.//2g"
mapfile -t awx_playbooks < <(cd "${installed}" && ls deploy/awx/*.yml deploy/awx/playbooks/*.yml 2>/dev/null)
if [[ ${#awx_playbooks[@]} -gt 0 ]]; then
    (cd "${installed}" && ansible-playbook --syntax-check "${awx_playbooks[@]}" 2> "${work}/syntax.err" >/dev/null) \
        || { cat "${work}/syntax.err" >&2; exit 1; }
    echo "ansible-playbook --syntax-check: ${#awx_playbooks[@]} AWX playbooks (${awx_playbooks[*]})"
fi

step "ansible-builder create (execution environment build context)"
cp -r "${repo}/ee" "${work}/ee"
cp "${tarball}" "${work}/ee/gpuops-nvidia.tar.gz"
ansible-builder create --output-filename Containerfile -f "${work}/ee/execution-environment.yml" \
    -c "${work}/ee/context" >/dev/null
base_image=$(sed -n 's/^ARG EE_BASE_IMAGE="\(.*\)"$/\1/p' "${work}/ee/context/Containerfile")
[[ -n "${base_image}" && "${base_image}" != *:latest ]] \
    || { echo "release-check: the EE base image is not pinned (${base_image:-none})" >&2; exit 1; }
test -f "${work}/ee/context/_build/collections/gpuops-nvidia.tar.gz"
echo "ansible-builder create: context with Containerfile (FROM ${base_image}) and the collection tarball"

step "passed"
