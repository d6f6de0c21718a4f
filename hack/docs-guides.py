#!/usr/bin/env python3
"""`make docs`: copy the Markdown guides of docs/ to where the docs site's RST pages include them (DEST), with
their links rewritten for the site: a link to another guide (`node_drain.md#anchor`) points at that guide's page,
a link to any other file of the repository at its GitHub page (the `repository` of galaxy.yml).
    usage: hack/docs-guides.py REPO DEST
"""
import os
import re
import sys

import yaml

LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)#\s]+)(#[^)\s]*)?\)")


def rewrite(text: str, guides: set, repository: str) -> str:
    def target(match):
        path, anchor = match.group(1), match.group(2) or ""
        name = os.path.basename(path)
        if os.path.dirname(path) == "" and name.endswith(".md") and name[:-3] in guides:
            return "](/docsite/guide_%s.rst%s)" % (name[:-3], anchor)
        in_repo = os.path.normpath(os.path.join("docs", path))
        return "](%s/blob/main/%s%s)" % (repository, in_repo, anchor)
    return LINK.sub(target, text)


def main(repo: str, dest: str) -> None:
    with open(os.path.join(repo, "galaxy.yml")) as stream:
        repository = yaml.safe_load(stream)["repository"].rstrip("/")
    docs = os.path.join(repo, "docs")
    guides = {name[:-3] for name in os.listdir(docs) if name.endswith(".md")}
    stubs = os.path.join(docs, "docsite", "rst")
    missing = sorted(name for name in guides if not os.path.exists(os.path.join(stubs, "guide_%s.rst" % name)))
    if missing:
        sys.exit("docs/docsite/rst/ has no page for the guides %s (guide_NAME.rst: its label and title; the site includes docs/NAME.md there)"
                 % ", ".join(missing))
    os.makedirs(dest, exist_ok=True)
    for name in sorted(guides):
        with open(os.path.join(docs, name + ".md")) as stream:
            text = stream.read()
        with open(os.path.join(dest, name + ".md"), "w") as stream:
            stream.write(rewrite(text, guides, repository))


if __name__ == "__main__":
    main(*sys.argv[1:3])
