#!/usr/bin/env bash
# `make docs`: the docs site of gpuops.nvidia with antsibull-docs and Sphinx, offline. The plugin and role pages
# come from the collection in COLLECTIONS_PATH (the `make tree` copy); the guides (docs/*.md) through the RST
# pages of docs/docsite/rst/ listed in docs/docsite/extra-docs.yml, which the site's copy makes include them (MyST). Fails on any
# Sphinx warning but those of the intersphinx inventories, which are not reachable offline.
#   usage: hack/docs-build.sh COLLECTIONS_PATH DEST [VENV_BIN]     HTML: DEST/build/html/index.html
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
collections="$1"
dest="$2"
bin=${3:-${repo}/.venv/bin}
export PATH="${bin}:${PATH}" ANSIBLE_COLLECTIONS_PATH="${collections}"
for tool in antsibull-docs sphinx-build; do
    command -v "${tool}" >/dev/null || { echo "docs: ${tool} is missing: pip install -r requirements-dev.txt" >&2; exit 2; }
done

rm -rf "${dest}"
mkdir -p -m 700 "${dest}"   # antsibull-docs writes only into a folder no one else can write to
# The repository's guide pages (docs/docsite/rst/guide_*.rst) are short RST that antsibull-docs lint checks on
# their own, where no include could resolve; the site is built from a copy of the collection in which each page,
# below its label, includes its Markdown guide (copied by hack/docs-guides.py to rst/_guides).
site_collections="${dest}/collections"
mkdir -p "${site_collections}/ansible_collections/gpuops"
cp -a "${collections}/ansible_collections/gpuops/nvidia" "${site_collections}/ansible_collections/gpuops/nvidia"
for page in "${site_collections}"/ansible_collections/gpuops/nvidia/docs/docsite/rst/guide_*.rst; do
    name=$(basename "${page}" .rst)
    { head -n 1 "${page}"; printf '\n.. include:: /_guides/%s.md\n   :parser: myst_parser.sphinx_\n' "${name#guide_}"; } \
        > "${page}.new" && mv "${page}.new" "${page}"
done
export ANSIBLE_COLLECTIONS_PATH="${site_collections}"
antsibull-docs sphinx-init --use-current --squash-hierarchy --fail-on-error --dest-dir "${dest}" \
    --project gpuops.nvidia --copyright "gpuops.nvidia contributors" --title "gpuops.nvidia" gpuops.nvidia >/dev/null
cat >> "${dest}/conf.py" <<'CONF'

# gpuops.nvidia: the guides are Markdown (MyST), included by the RST pages of docs/docsite/rst/
extensions.append('myst_parser')
myst_heading_anchors = 3
exclude_patterns = ['_guides']
# the guides' ```console blocks are commands without prompts: Pygments' console lexer stumbles on an apostrophe
# in their comments, the bash lexer reads them right
from pygments.lexers.shell import BashLexer  # noqa: E402
from sphinx.highlighting import lexers  # noqa: E402
lexers['console'] = BashLexer()
# offline (CI, air-gapped) the inventories are not reachable: do not wait long for them
intersphinx_timeout = 5
CONF

(cd "${dest}" && antsibull-docs --config-file antsibull-docs.cfg collection --use-current --squash-hierarchy \
    --fail-on-error --cleanup everything --dest-dir rst gpuops.nvidia >/dev/null)
python3 "${repo}/hack/docs-guides.py" "${repo}" "${dest}/rst/_guides"
(cd "${dest}" && sphinx-build -q -b html -c . -w warnings.txt --keep-going rst build/html 2> sphinx-stderr.txt) \
    || { cat "${dest}/sphinx-stderr.txt" >&2; exit 1; }
python3 "${repo}/hack/docs-warnings.py" "${dest}/warnings.txt"
test -f "${dest}/build/html/index.html"
echo "docs: ${dest}/build/html/index.html"
