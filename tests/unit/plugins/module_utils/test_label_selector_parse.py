# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The label selector string parser: what the API server accepts parses, what it would refuse with HTTP 400 is
refused here first, naming the term."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.selectors import parse_label_selector


def test_every_operator_of_the_selector_syntax_parses():
    assert parse_label_selector("app=training, tier in (a, b),env!=prod,!debug,gpuops.nvidia/wait-before-drain") == [
        {"key": "app", "operator": "In", "values": ["training"]},
        {"key": "tier", "operator": "In", "values": ["a", "b"]},
        {"key": "env", "operator": "NotIn", "values": ["prod"]},
        {"key": "debug", "operator": "DoesNotExist"},
        {"key": "gpuops.nvidia/wait-before-drain", "operator": "Exists"},
    ]
    assert parse_label_selector("job==x,zone notin (z1)") == [
        {"key": "job", "operator": "In", "values": ["x"]}, {"key": "zone", "operator": "NotIn", "values": ["z1"]}]
    assert parse_label_selector("") == []


@pytest.mark.parametrize("text", [
    "app=(x", "app in training", "a b", "app=x,", ",app=x", "a=b=c", "job=２", "ｊob=x", "{{ selector }}",
    "x" * 64 + "=y", "app in (a,(b))", "Example.com/app=x", "app=-x",
])
def test_what_the_api_server_would_refuse_is_refused_naming_the_term(text):
    with pytest.raises(ValueError, match="is not a selector term|is not a label value"):
        parse_label_selector(text)


@pytest.mark.parametrize("value", [None, 5, ["app=x"]])
def test_a_selector_that_is_not_a_string_is_refused(value):
    with pytest.raises(ValueError, match="a label selector is a string"):
        parse_label_selector(value)
