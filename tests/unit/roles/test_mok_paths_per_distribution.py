# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""The module-signing key pair the nvidia_driver role makes and enrols, and the one precheck looks for, by default
the pair the distribution's DKMS signs with; an inventory's choice wins."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.tests.unit.roles.test_nvidia_driver_os_vars import (
    DEBIAN_12, ROCKY_9, UBUNTU_2204, UBUNTU_2404, render)
from ansible_collections.gpuops.nvidia.tests.unit.roles.test_role_rendering import role_vars

SHIM_SIGNED = ("/var/lib/shim-signed/mok/MOK.priv", "/var/lib/shim-signed/mok/MOK.der")
DKMS3 = ("/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub")
GPUOPS = ("/var/lib/gpuops/mok/MOK.priv", "/var/lib/gpuops/mok/MOK.der")


@pytest.mark.parametrize("facts, pair", [(UBUNTU_2204, SHIM_SIGNED), (UBUNTU_2404, SHIM_SIGNED), (ROCKY_9, DKMS3),
                                         (DEBIAN_12, GPUOPS)])
def test_the_driver_role_signs_with_the_pair_the_distributions_dkms_uses_and_precheck_looks_there(facts, pair):
    rendered = render(facts)
    assert (rendered["nvidia_driver_mok_private_key"], rendered["nvidia_driver_mok_certificate"]) == pair
    precheck = role_vars("precheck", "vars/main.yml", ansible_facts=facts)
    assert (precheck.template(precheck.available_variables["precheck_mok_private_key"]),
            precheck.template(precheck.available_variables["precheck_mok_certificate"])) == pair


def test_an_inventorys_key_pair_wins_over_the_distributions():
    rendered = render(ROCKY_9, nvidia_driver_mok_private_key="/srv/mok/key.pem",
                      nvidia_driver_mok_certificate="/srv/mok/cert.der")
    assert (rendered["nvidia_driver_mok_private_key"], rendered["nvidia_driver_mok_certificate"]) == (
        "/srv/mok/key.pem", "/srv/mok/cert.der")
