"""Objects as kube-apiserver serializes them: a field its Go type tags ``omitempty`` is not there when it is
false, zero, empty or null (``spec.unschedulable: false`` after an uncordon, ``spec.taints: []`` after the
last taint went, ``labels: {}``), so clients that test for absence see what they see on a real cluster.

The store prunes every built-in object once, when it is written (``prune(resource, obj)``); objects of
CustomResourceDefinitions are kept as sent, as the API server keeps unstructured objects. The tables below
name the exceptions, read from the Go types (k8s.io/api core/v1, apps/v1, batch/v1, policy/v1, coordination/v1,
rbac/v1, node/v1, resource/v1beta1):

- a zero is kept for fields without ``omitempty`` and for pointers (``*int32``, ``*bool``, ``*IntOrString``:
  ``spec.replicas: 0``, ``maxSurge: 0``, ``runAsUser: 0``, ``controller: false`` stay);
- an empty ``{}`` is kept unless the field is a map: structs are never omitted by Go's encoder
  (``resources: {}``, ``securityContext: {}``, ``lastState: {}`` stay, ``labels: {}`` goes);
- null is dropped except for ``metav1.Time`` structs, which Go writes as null (``lastProbeTime: null``);
- maps and raw fields (label values, ConfigMap data, ControllerRevision data) are not looked into.
"""
from __future__ import annotations

from typing import Dict, FrozenSet

from .resources import RESOURCES

# Map-typed fields (``map[string]...``, all omitempty): dropped when empty, their entries never pruned.
_MAP_FIELDS = frozenset({
    "labels", "annotations", "nodeSelector", "matchLabels", "limits", "requests", "capacity", "allocatable",
    "data", "binaryData", "stringData", "disruptedPods", "overhead", "allocatedResources", "attributes",
})
# Opaque fields (``runtime.RawExtension``): kept as sent.
_RAW_FIELDS = frozenset({"parameters", "raw", "openAPIV3Schema", "fieldsV1"})

# Fields kept when zero, false or empty wherever they appear in the kinds served: fields without omitempty
# and pointers, whose names mean the same thing in every kind that has them.
_KEPT_BY_NAME = frozenset({
    # ObjectMeta, OwnerReference
    "deletionGracePeriodSeconds", "controller", "blockOwnerDeletion",
    # PodSpec and its parts (pointers, or no omitempty)
    "containers", "name", "terminationGracePeriodSeconds", "activeDeadlineSeconds", "automountServiceAccountToken",
    "shareProcessNamespace", "priority", "enableServiceLinks", "preemptionPolicy", "hostUsers", "setHostnameAsFQDN",
    "runtimeClassName", "runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup", "privileged", "readOnlyRootFilesystem",
    "allowPrivilegeEscalation", "procMount", "fsGroupChangePolicy", "tolerationSeconds", "containerPort", "port",
    "optional", "defaultMode", "sizeLimit", "key", "operator", "effect", "weight", "maxSkew", "topologyKey",
    "whenUnsatisfiable",
    # PodStatus, ContainerStatus, conditions
    "ready", "restartCount", "image", "imageID", "started", "exitCode", "type", "status",
    # NodeStatus: NodeSystemInfo and DaemonEndpoint have no omitempty
    "machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion", "kubeletVersion",
    "kubeProxyVersion", "operatingSystem", "architecture", "Port", "address",
    # workloads (apps/v1, batch/v1, policy/v1)
    "revisionHistoryLimit", "progressDeadlineSeconds", "collisionCount", "partition", "maxUnavailable", "maxSurge",
    "minAvailable", "currentNumberScheduled", "numberMisscheduled", "desiredNumberScheduled", "numberReady",
    "parallelism", "completions", "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes", "activeDeadline",
    "ttlSecondsAfterFinished", "suspend", "manualSelector", "completionMode", "podReplacementPolicy", "terminating",
    "disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods", "revision",
    # ConfigMap, Secret, ServiceAccount, Lease, RBAC, RuntimeClass, ResourceSlice
    "immutable", "holderIdentity", "leaseDurationSeconds", "leaseTransitions", "rules", "verbs", "handler",
    "driver", "generation", "resourceSliceCount",
    # CustomResourceDefinition
    "served", "storage", "storedVersions",
    # other pointers of the kinds served (checked against k8s.io/api: every *int32/*int64/*bool/*string field)
    "start", "storageClassName", "volumeAttributesClassName", "minDomains", "terminatingReplicas", "managedBy",
    "failedIndexes", "succeededCount", "allocateLoadBalancerNodePorts", "loadBalancerClass", "trafficDistribution",
    "appProtocol", "expirationSeconds", "userNamespaces", "hostProcess", "runAsUserName", "localhostProfile",
    "recursiveReadOnlyMounts", "preferredHolder", "hostnameOverride", "mode",
})

# Fields kept when zero at one path only (their name is omitempty elsewhere). Paths skip list indices.
_KEPT_AT: Dict[str, FrozenSet[str]] = {
    "deployments": frozenset({"spec.replicas"}),
    "replicasets": frozenset({"spec.replicas", "status.replicas"}),
    "statefulsets": frozenset({"spec.replicas", "spec.serviceName", "status.replicas", "status.availableReplicas"}),
    "poddisruptionbudgets": frozenset({"status.conditions.reason", "status.conditions.message"}),
    "events": frozenset({"reportingComponent", "reportingInstance"}),
    "events.events.k8s.io": frozenset({"eventTime"}),
}

# metav1.Time / MicroTime structs: Go writes their zero value as null, so a null sent stays.
_NULL_KEPT = frozenset({"creationTimestamp", "lastProbeTime", "lastTransitionTime", "lastHeartbeatTime",
                        "lastUpdateTime", "firstTimestamp", "lastTimestamp", "eventTime", "startedAt", "finishedAt"})

_EMPTY: FrozenSet[str] = frozenset()


def prune(resource: str, obj: dict) -> dict:
    """Drop, in place, the omitempty fields of a built-in object that are false, zero, empty or null."""
    info = RESOURCES.get(resource)
    if info is None or info.get("custom"):
        return obj
    _prune_struct(obj, "", _KEPT_AT.get(resource, _EMPTY))
    return obj


def _is_zero(value) -> bool:
    return value is False or value == "" or value == [] or (type(value) in (int, float) and value == 0)


def _prune_struct(struct: dict, path: str, kept_at: FrozenSet[str]) -> None:
    for field in list(struct):
        value = struct[field]
        field_path = path + field
        if value is None:
            if field not in _NULL_KEPT:
                del struct[field]
        elif isinstance(value, dict):
            if field in _MAP_FIELDS:
                if not value:
                    del struct[field]
            elif field not in _RAW_FIELDS:
                _prune_struct(value, field_path + ".", kept_at)
        elif isinstance(value, list):
            if not value and field not in _KEPT_BY_NAME and field_path not in kept_at:
                del struct[field]
            else:
                for item in value:
                    if isinstance(item, dict):
                        _prune_struct(item, field_path + ".", kept_at)
        elif _is_zero(value) and field not in _KEPT_BY_NAME and field_path not in kept_at:
            del struct[field]
