# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Decisions of the device_plugin_config change kind on the NVIDIA device plugin's config and Node JSON: what one
named config of the plugin's ConfigMap shares (time-slicing or MPS replicas, the resource name), what a node should
then advertise and show in GPU Feature Discovery's labels, and whether the node already runs the config.

Facts from NVIDIA/k8s-device-plugin: `api/config/v1/replicas.go` (ReplicatedResources: `renameByDefault`, a resource
without `rename` becomes `<name>.shared`; `replicas`), `api/config/v1/sharing.go` (the strategy is MPS when `mps`
has a resource with replicas > 1, time-slicing when `timeSlicing` has one, else none), `internal/lm/resource.go`
(GFD labels `nvidia.com/gpu.replicas`, the `-SHARED` product suffix when shared under the resource's own name) and
`cmd/config-manager/main.go` (the node label `nvidia.com/device-plugin.config` picks a config by name)."""

from __future__ import annotations

CONFIG_LABEL = 'nvidia.com/device-plugin.config'
GPU_RESOURCE = 'nvidia.com/gpu'
REPLICAS_LABEL = 'nvidia.com/gpu.replicas'
STRATEGY_LABEL = 'nvidia.com/gpu.sharing-strategy'
PRODUCT_LABEL = 'nvidia.com/gpu.product'
COUNT_LABEL = 'nvidia.com/gpu.count'
SHARED_SUFFIX = '-SHARED'


class ConfigError(ValueError):
    """A config the device plugin would refuse."""


def _replicated(config, key):
    value = (config.get('sharing') or {}).get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError('sharing.%s is not a mapping' % key)
    return value


def config_sharing(config):
    """What a parsed config (one value of the plugin's ConfigMap) does to whole GPUs: ``strategy``
    (``time-slicing``, ``mps`` or ``none``), ``replicas`` per GPU, ``resource`` (the name the plugin advertises
    them under) and ``renamed``. ConfigError for a config the plugin refuses."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ConfigError('the config is not a mapping')
    version = config.get('version', 'v1')
    if version != 'v1':
        raise ConfigError('unknown config version %r (the plugin reads v1)' % (version,))
    for strategy, key in (('mps', 'mps'), ('time-slicing', 'timeSlicing')):
        replicated = _replicated(config, key)
        for resource in replicated.get('resources') or []:
            if not isinstance(resource, dict) or resource.get('name') != GPU_RESOURCE:
                continue
            replicas = resource.get('replicas')
            if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
                raise ConfigError('sharing.%s: replicas of %s must be a number >= 1, not %r'
                                  % (key, GPU_RESOURCE, replicas))
            if replicas == 1:
                continue
            rename = resource.get('rename') or ''
            if not rename and replicated.get('renameByDefault'):
                rename = GPU_RESOURCE + '.shared'
            return {'strategy': strategy, 'replicas': replicas, 'resource': rename or GPU_RESOURCE,
                    'renamed': bool(rename)}
    return {'strategy': 'none', 'replicas': 1, 'resource': GPU_RESOURCE, 'renamed': False}


def expected_node(sharing, gpu_count):
    """What a node with ``gpu_count`` GPUs shows under ``sharing``: ``resource`` and ``count`` allocatable, and
    the GFD ``labels`` that must say so."""
    return {'resource': sharing['resource'], 'count': gpu_count * sharing['replicas'],
            'labels': {REPLICAS_LABEL: str(sharing['replicas']), STRATEGY_LABEL: sharing['strategy']}}


def product_problem(sharing, product):
    """None when GFD's product label agrees with the sharing (``-SHARED`` exactly when replicas > 1 under the
    resource's own name), else what is wrong."""
    shared = sharing['replicas'] > 1 and not sharing['renamed']
    if product is None:
        return 'no %s label' % PRODUCT_LABEL
    if shared != product.endswith(SHARED_SUFFIX):
        wanted = 'with' if shared else 'without'
        return '%s is %s, expected %s the %s suffix' % (PRODUCT_LABEL, product, wanted, SHARED_SUFFIX)
    return None


def node_config(node):
    """The config name the node's label selects ('' when unlabelled)."""
    labels = (node.get('metadata') or {}).get('labels') or {}
    return labels.get(CONFIG_LABEL) or ''


def node_at_target(node, config):
    """The node's label already names ``config``: nothing to change."""
    return bool(config) and node_config(node) == config
