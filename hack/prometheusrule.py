#!/usr/bin/env python3
"""Write files/prometheus/gpu-alerts-prometheusrule.yml (a prometheus-operator PrometheusRule) from the rule file
files/prometheus/gpu-alerts.yml, so the two never disagree. `--check` writes nothing and exits 1 when the
manifest on disk is not what this script would write (CI and lab/tests/test_prometheus_rules.py run it).
"""
from __future__ import annotations

import argparse
import os
import sys

import yaml

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES_PATH = os.path.join(REPO_DIR, "files", "prometheus", "gpu-alerts.yml")
MANIFEST_PATH = os.path.join(REPO_DIR, "files", "prometheus", "gpu-alerts-prometheusrule.yml")
HEADER = ("---\n"
          "# Generated from gpu-alerts.yml by hack/prometheusrule.py; edit gpu-alerts.yml and run the script again.\n"
          "# Add the labels your Prometheus' ruleSelector selects on (kube-prometheus-stack: release: <name>).\n")


class BlockDumper(yaml.SafeDumper):
    """Indents sequences under their key (as yamllint wants) and writes multi-line strings as literal
    blocks, long ones folded."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def _represent_str(dumper, text):
    style = "|" if "\n" in text else (">" if len(text) > 100 else None)
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


BlockDumper.add_representer(str, _represent_str)


def manifest_text(rules_text: str) -> str:
    rules = yaml.safe_load(rules_text)
    manifest = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpuops-nvidia-gpu-alerts",
            "labels": {"app.kubernetes.io/name": "gpuops-nvidia", "app.kubernetes.io/component": "gpu-alerts"},
        },
        "spec": {"groups": rules["groups"]},
    }
    return HEADER + yaml.dump(manifest, Dumper=BlockDumper, sort_keys=False, width=110, allow_unicode=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the manifest is not up to date")
    args = parser.parse_args()
    with open(RULES_PATH) as rules_file:
        wanted = manifest_text(rules_file.read())
    if args.check:
        try:
            with open(MANIFEST_PATH) as manifest_file:
                current = manifest_file.read()
        except FileNotFoundError:
            current = None
        if current != wanted:
            print("%s is not generated from %s: run hack/prometheusrule.py" % (
                os.path.relpath(MANIFEST_PATH, REPO_DIR), os.path.relpath(RULES_PATH, REPO_DIR)), file=sys.stderr)
            return 1
        return 0
    with open(MANIFEST_PATH, "w") as manifest_file:
        manifest_file.write(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
