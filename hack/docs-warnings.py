#!/usr/bin/env python3
"""`make docs`: fail on any Sphinx warning in WARNINGS_FILE except those of the intersphinx inventories, which
cannot be fetched offline (CI and air-gapped machines). Prints what it ignored and what fails.

Offline, the inventory messages come with their consequences: the plugin pages' references into Ansible's own
docs (``common_return_values``, ``callback_plugins``, ``ansible.builtin`` plugins, ``ANSIBLE_*`` variables) stay
unresolved. Those are ignored too, but only when the inventories were not reached and only for targets outside
this collection: a broken reference to a ``ansible_collections.gpuops.nvidia.*`` label always fails.
    usage: hack/docs-warnings.py WARNINGS_FILE
"""
import re
import sys

# Sphinx's messages when an intersphinx inventory cannot be read (no network, no local copy)
OFFLINE_INTERSPHINX = re.compile(r"failed to reach any of the inventories|intersphinx inventory .* not (fetchable|readable)"
                                 r"|encountered some issues with some of the inventories")


LEVEL = re.compile(r"\b(WARNING|ERROR|CRITICAL):")
# what Sphinx says of a reference it could not resolve: the label, or the environment variable
UNRESOLVED = re.compile(r"undefined label: '([^']+)' \[ref\.ref\]|'envvar' reference target not found: (\S+) \[ref\.envvar\]")
COLLECTION_LABEL = "ansible_collections.gpuops.nvidia."


def intersphinx_target(entry: str) -> bool:
    found = UNRESOLVED.search(entry)
    return bool(found) and not (found.group(1) or found.group(2)).startswith(COLLECTION_LABEL)


def main(path: str) -> int:
    with open(path) as stream:
        # a warning starts at a line with WARNING/ERROR/CRITICAL; the lines after it belong to it
        entries, current = [], []
        for line in stream:
            if not LEVEL.search(line) and current:
                current.append(line)
                continue
            if current:
                entries.append("".join(current))
            current = [line] if line.strip() else []
        if current:
            entries.append("".join(current))
    offline = [entry for entry in entries if OFFLINE_INTERSPHINX.search(entry)]
    if offline:
        offline += [entry for entry in entries if intersphinx_target(entry)]
    failing = [entry for entry in entries if entry not in offline]
    print("docs: %d warning(s) of offline intersphinx ignored, %d other" % (len(offline), len(failing)))
    for entry in failing:
        sys.stdout.write(entry)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
