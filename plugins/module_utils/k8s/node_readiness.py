# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Is this node back as a GPU node? Pure decisions of gpu_allocatable_wait over Node and ResourceSlice JSON.

``check_node(node, expectation, now, ...)`` says what holds and what does not (problems, each with a code and a
message an SRE can act on); ``NodeTracker`` keeps what the module observed over time (the old bootID seen, since
when every check passed) so ``stable_seconds`` and "a Ready condition after the boot" can be judged;
``diagnosis(states)`` orders the problems of all nodes worst first.
"""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import format_micro_time, format_time, parse_time

DRA = 'dra'
DRA_DRIVER = 'gpu.nvidia.com'
# resource.k8s.io versions that serve ResourceSlices with spec.devices, preferred first (v1 is GA in 1.34).
DRA_API_VERSIONS = ('v1', 'v1beta2', 'v1beta1')

# metav1.Time has whole seconds: a transition stamped up to 1 s before an observation may still follow it.
TIME_GRANULARITY_S = 1.0

# Problem codes, worst first: the order of the diagnosis.
PROBLEM_ORDER = (
    'node_missing',          # no Node object of that name
    'not_ready',             # Ready condition False or Unknown
    'not_rebooted',          # bootID is still the one recorded before the reboot
    'ready_before_reboot',   # Ready, but the condition dates from before the reboot
    'no_gpu_capacity',       # the resource is not advertised at all (no driver / no device plugin)
    'stale_device_plugin',   # capacity present, allocatable 0: the plugin did not register again
    'fewer_devices',         # fewer devices than expected: an unhealthy GPU
    'label_mismatch',        # a required label is absent or has another value
    'gfd_label_mismatch',    # GPU Feature Discovery's product or count label disagrees with NVML on the node
    'not_stable',            # every check passes, not yet for stable_seconds
)


def _rank(code):
    return PROBLEM_ORDER.index(code)


def _quantity(value):
    """An extended resource count ('8', 8) as int; None when absent or not a plain integer."""
    if value is None:
        return None
    try:
        return int(str(value))
    except ValueError:
        return None


def condition(node, condition_type):
    for item in ((node or {}).get('status') or {}).get('conditions') or []:
        if item.get('type') == condition_type:
            return item
    return None


def boot_id(node):
    return (((node or {}).get('status') or {}).get('nodeInfo') or {}).get('bootID') or None


def extended_resource(node, resource):
    """(capacity, allocatable) of an extended resource as ints (None when the node does not list it)."""
    status = (node or {}).get('status') or {}
    return (_quantity((status.get('capacity') or {}).get(resource)),
            _quantity((status.get('allocatable') or {}).get(resource)))


def dra_api_version(served_versions):
    """The resource.k8s.io version to read ResourceSlices with, from discovery's list; None when none fits."""
    for version in DRA_API_VERSIONS:
        if version in served_versions:
            return version
    return None


def dra_gpu_count(slices, node_name, driver=DRA_DRIVER):
    """Whole-GPU devices the DRA driver publishes for the node (MIG partitions are not counted); None when the
    driver publishes no ResourceSlice for it. Only the newest generation of each pool counts, as the scheduler
    reads them (a driver that restarts republishes its pool with a higher generation)."""
    newest = {}
    for one in slices or []:
        spec = one.get('spec') or {}
        if spec.get('driver') != driver or spec.get('nodeName') != node_name:
            continue
        pool = spec.get('pool') or {}
        generation = pool.get('generation') or 0
        name = pool.get('name') or node_name
        if name not in newest or generation > newest[name][0]:
            newest[name] = (generation, [])
        if generation == newest[name][0]:
            newest[name][1].append(spec)
    if not newest:
        return None
    return sum(1 for pool in newest.values() for spec in pool[1] for device in spec.get('devices') or []
               if _device_type(device) in (None, 'gpu'))


def _device_type(device):
    # resource.k8s.io/v1 puts attributes on the device; v1beta1 under device.basic
    attributes = device.get('attributes') or (device.get('basic') or {}).get('attributes') or {}
    kind = attributes.get('type') or {}
    return kind.get('string') if isinstance(kind, dict) else kind


def check_node(node, expectation, now, dra_devices=None, old_boot_seen_at=None):
    """What holds for one node now.

    ``expectation``: resource, count (None: allocatable must equal capacity and be > 0), labels (dict),
    boot_id_before (None: a reboot is not required), require_ready. ``dra_devices``: the node's GPU count from
    ``dra_gpu_count`` when the resource is ``dra``. ``old_boot_seen_at``: when the node was last seen on the
    boot recorded before the reboot (a Ready condition older than that does not count).
    Returns a dict: ready, ready_since, boot_id, rebooted, capacity, allocatable, labels_matched,
    label_mismatches, problems (list of {code, message}, worst first).
    """
    problems = []
    state = {'ready': False, 'ready_since': None, 'boot_id': None, 'rebooted': None, 'capacity': None,
             'allocatable': None, 'labels_matched': False, 'label_mismatches': {}, 'problems': problems}
    if node is None:
        problems.append(_problem('node_missing', 'no Node object of this name'))
        return state
    ready = condition(node, 'Ready') or {}
    ready_since = parse_time(ready.get('lastTransitionTime'))
    state['ready'] = ready.get('status') == 'True'
    state['ready_since'] = format_time(ready_since)
    state['boot_id'] = boot_id(node)
    before = expectation.get('boot_id_before')
    if before:
        state['rebooted'] = state['boot_id'] is not None and state['boot_id'] != before
    if expectation.get('require_ready', True) and not state['ready']:
        problems.append(_problem('not_ready', 'NotReady (Ready=%s%s) since %s%s' % (
            ready.get('status') or 'absent', ', %s' % ready['reason'] if ready.get('reason') else '',
            state['ready_since'] or 'unknown', ': %s' % ready['message'] if ready.get('message') else '')))
    if state['rebooted'] is False:
        problems.append(_problem('not_rebooted', 'never rebooted: bootID is still %s' % before))
    elif (state['rebooted'] and expectation.get('require_ready', True) and state['ready']
          and old_boot_seen_at is not None
          and (ready_since is None or ready_since < old_boot_seen_at - TIME_GRANULARITY_S)):
        problems.append(_problem('ready_before_reboot', 'Ready since %s, before the reboot: waiting for the '
                                 'kubelet of the new boot to report Ready' % (state['ready_since'] or 'unknown')))
    problems.extend(_device_problems(node, expectation, dra_devices, state))
    problems.extend(_label_problems(node, expectation.get('labels') or {}, state))
    problems.extend(gfd_label_problems(node, expectation.get('nvml_gpu_names')))
    problems.sort(key=lambda problem: _rank(problem['code']))
    return state


def _device_problems(node, expectation, dra_devices, state):
    if expectation.get('resources'):
        return _resources_problems(node, expectation['resources'], state)
    resource = expectation.get('resource') or 'nvidia.com/gpu'
    count = expectation.get('count')
    if resource == DRA:
        state['capacity'] = state['allocatable'] = dra_devices
        if not dra_devices:
            return [_problem('no_gpu_capacity', 'no %s devices in ResourceSlices of driver %s (is the driver '
                             'loaded and the DRA kubelet plugin running on the node?)' % ('GPU', DRA_DRIVER))]
        if count is not None and dra_devices < count:
            return [_problem('fewer_devices', '%d of %d GPUs published in ResourceSlices: an unhealthy GPU, check '
                             'Xid (nvidia_driver_facts) on the node' % (dra_devices, count))]
        return []
    capacity, allocatable = extended_resource(node, resource)
    state['capacity'], state['allocatable'] = capacity, allocatable
    if not capacity:
        return [_problem('no_gpu_capacity', 'no %s capacity: the device plugin never registered on this node '
                         '(driver not loaded, or the plugin pod not running)' % resource)]
    if not allocatable:
        return [_problem('stale_device_plugin', '%s capacity %d but allocatable 0: the kubelet lost the device '
                         'plugin registration (stale device-plugin ledger); remedy: restart the device-plugin pod '
                         'on this node (gpuops.nvidia.device_plugin_restart)' % (resource, capacity))]
    expected = capacity if count is None else count
    if allocatable < expected:
        return [_problem('fewer_devices', '%s allocatable %d, expected %d (capacity %d): an unhealthy GPU, check '
                         'Xid (nvidia_driver_facts) on the node' % (resource, allocatable, expected, capacity))]
    return []


def _resources_problems(node, wanted, state):
    """Each extended resource of ``wanted`` (name -> count, a MIG layout) allocatable at least that many times;
    the capacity and allocatable of the state are the sums over them."""
    capacities, allocatables = {}, {}
    for name in sorted(wanted):
        capacity, allocatable = extended_resource(node, name)
        capacities[name], allocatables[name] = capacity or 0, allocatable or 0
    state['capacity'] = sum(capacities.values())
    state['allocatable'] = sum(allocatables.values())
    missing = ['%s %d of %d' % (name, allocatables[name], wanted[name])
               for name in sorted(wanted) if allocatables[name] < wanted[name]]
    if not missing:
        return []
    if not any(capacities.values()):
        return [_problem('no_gpu_capacity', 'none of the expected resources advertised (%s): the device plugin has '
                         'not registered them (MIG instances not created, or the plugin started before they were)'
                         % ', '.join(missing))]
    return [_problem('fewer_devices', 'expected resources missing: %s allocatable' % ', '.join(missing))]


def _label_problems(node, wanted, state):
    labels = (node.get('metadata') or {}).get('labels') or {}
    mismatches = {key: labels.get(key) for key, value in sorted(wanted.items()) if labels.get(key) != str(value)}
    state['label_mismatches'] = mismatches
    state['labels_matched'] = not mismatches
    return [_problem('label_mismatch', 'label %s is %s, expected %s' % (
        key, 'absent' if shown is None else repr(shown), repr(str(wanted[key])))) for key, shown in mismatches.items()]


GFD_PRODUCT_LABEL = 'nvidia.com/gpu.product'
GFD_COUNT_LABEL = 'nvidia.com/gpu.count'


def gfd_product_name(nvml_name):
    """GPU Feature Discovery's product label of an NVML product name: its words joined by '-'
    (C(NVIDIA H100 80GB HBM3) -> C(NVIDIA-H100-80GB-HBM3))."""
    return '-'.join(nvml_name.split())


def gfd_label_problems(node, nvml_gpu_names):
    """Do GFD's product and count labels describe the GPUs NVML sees on the node (``nvml_gpu_names``: one
    product name per physical GPU, from nvidia_driver_facts)? A stale label after a GPU swap or a driver change
    misleads every scheduler decision that selects on it. GFD may suffix the product (C(-MIG-1g.10gb) with the
    MIG single strategy, C(-SHARED) with sharing); with the MIG single strategy the count is of MIG devices,
    so only the product prefix is checked then. Nodes of mixed GPU models get the count check alone."""
    if not nvml_gpu_names:
        return []
    labels = (node.get('metadata') or {}).get('labels') or {}
    product, count = labels.get(GFD_PRODUCT_LABEL), labels.get(GFD_COUNT_LABEL)
    problems = []
    names = sorted(set(gfd_product_name(name) for name in nvml_gpu_names))
    if len(names) == 1 and (product is None or not (product == names[0] or product.startswith(names[0] + '-'))):
        problems.append(_problem('gfd_label_mismatch', 'label %s is %s, but NVML on the node sees %s: GPU Feature '
                                 'Discovery has not relabelled the node (is its pod running there?)' % (
                                     GFD_PRODUCT_LABEL, 'absent' if product is None else repr(product),
                                     repr(names[0]))))
    if '-MIG-' not in (product or '') and count != str(len(nvml_gpu_names)):
        problems.append(_problem('gfd_label_mismatch', 'label %s is %s, but NVML on the node sees %d GPUs' % (
            GFD_COUNT_LABEL, 'absent' if count is None else repr(count), len(nvml_gpu_names))))
    return problems


def _problem(code, message):
    return {'code': code, 'message': message}


class NodeTracker:
    """What the wait observed of one node: the old boot last seen, since when every check passed, when the node
    was satisfied. ``observe(node, now)`` returns the state of ``check_node`` with ``satisfied`` and
    ``satisfied_at``; once satisfied a node stays satisfied (the wait is over for it)."""

    def __init__(self, name, expectation, stable_seconds):
        self.name = name
        self.expectation = expectation
        self.stable_seconds = stable_seconds
        self.old_boot_seen_at = None
        self.passing_since = None
        self.satisfied_at = None
        self.state = None

    def observe(self, node, now, dra_devices=None):
        before = self.expectation.get('boot_id_before')
        if node is not None and before and boot_id(node) == before:
            self.old_boot_seen_at = now
        state = check_node(node, self.expectation, now, dra_devices, self.old_boot_seen_at)
        if self.satisfied_at is None:
            if state['problems']:
                self.passing_since = None
            else:
                if self.passing_since is None:
                    self.passing_since = now
                self.state = state
                since = self._stable_since(now)
                if now - since >= self.stable_seconds:
                    self.satisfied_at = now
                else:
                    state['problems'].append(_problem('not_stable', 'every check passes since %s; waiting until it '
                                                      'held %ss' % (format_time(since), self.stable_seconds)))
        state['satisfied'] = self.satisfied_at is not None
        state['satisfied_at'] = format_micro_time(self.satisfied_at) if self.satisfied_at is not None else None
        if state['satisfied']:
            state['problems'] = []
        self.state = state
        return state

    def _stable_since(self, now):
        """Since when every check holds: the later of the first passing observation and the Ready transition (a
        transition stamped in the future, clock skew, is not trusted)."""
        since = self.passing_since
        ready_since = parse_time((self.state or {}).get('ready_since'))
        if self.expectation.get('require_ready', True) and ready_since is not None and ready_since <= now:
            since = max(since, ready_since)
        return since

    def due_at(self, now):
        """When the node will be satisfied if nothing changes (None: not while a check fails)."""
        if self.satisfied_at is not None or self.passing_since is None:
            return None
        return self._stable_since(now) + self.stable_seconds


def diagnosis(states):
    """``[{node, code, message}]`` of every unsatisfied node, worst problem first (then by node name)."""
    rows = []
    for name, state in states.items():
        for problem in state.get('problems') or []:
            rows.append({'node': name, 'code': problem['code'], 'message': problem['message']})
    rows.sort(key=lambda row: (_rank(row['code']), row['node']))
    return rows


def summary(rows):
    """One line per unsatisfied node (its worst problem), worst first, for the failure message."""
    seen, lines = set(), []
    for row in rows:
        if row['node'] not in seen:
            seen.add(row['node'])
            lines.append('%s: %s' % (row['node'], row['message']))
    return '; '.join(lines)
