"""ValidatingAdmissionPolicy (``admissionregistration.k8s.io/v1``) as kube-apiserver's admission plugin runs it:
every binding whose policy exists is matched against a CREATE/UPDATE/DELETE (the policy's ``matchConstraints``
intersected with the binding's ``matchResources``: resourceRules, excludeResourceRules, objectSelector,
namespaceSelector), then the policy's ``matchConditions`` (all true, or it is skipped), ``variables`` and
``validations`` are evaluated with a real CEL engine (cel-python, ``celpy``) over ``object``, ``oldObject``,
``request``, ``namespaceObject`` and ``variables``. A failed validation acts as the binding's
``validationActions`` say: ``Deny`` refuses the request (the validation's ``reason``, 422 for Invalid, as
``... is forbidden: ValidatingAdmissionPolicy 'P' with binding 'B' denied request: MESSAGE``), ``Warn`` returns a
``Warning`` header (``Validation failed for ValidatingAdmissionPolicy 'P' with binding 'B': MESSAGE``), ``Audit``
adds the ``validation.policy.admission.k8s.io/validation_failure`` audit annotation; neither affects the request.
An expression that fails to evaluate follows the policy's ``failurePolicy`` (Fail, the default, denies).
Not modelled: ``paramKind``/``paramRef`` (a policy with a paramKind is skipped), ``auditAnnotations``, type
checking and the CEL cost budget.

Kubernetes adds CEL extension libraries to its environment; the string functions the shipped policies use
(``join``, ``split``, ``lowerAscii``, ``upperAscii``, ``trim``) are registered here as celpy functions.
"""
from __future__ import annotations

import contextlib
import json
import threading
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from .errors import ApiError
from .resources import RESOURCES
from .selectors import SelectorError, label_selector_from_object

POLICIES = "validatingadmissionpolicies"
BINDINGS = "validatingadmissionpolicybindings"
AUDIT_ANNOTATION = "validation.policy.admission.k8s.io/validation_failure"
_REASON_CODES = {"Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413, "Unauthorized": 401}

_local = threading.local()
_programs: Dict[str, object] = {}
_programs_lock = threading.Lock()


class CelError(Exception):
    """An expression that did not compile or evaluate."""


# ------------------------------------------------------------------ request scope (warnings, audit annotations)

@contextlib.contextmanager
def request_scope() -> Iterator[dict]:
    """Collect the warnings and audit annotations of the policies evaluated in this thread's request."""
    outcome = {"warnings": [], "audit": []}
    _local.outcome = outcome
    try:
        yield outcome
    finally:
        _local.outcome = None


def _outcome() -> Optional[dict]:
    return getattr(_local, "outcome", None)


def warning_header(text: str) -> str:
    """A ``Warning`` header value (RFC 7234 ``299 - "text"``), as the API server writes it."""
    return '299 - "%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def audit_annotations(outcome: dict) -> Dict[str, str]:
    return {AUDIT_ANNOTATION: json.dumps(outcome["audit"], separators=(",", ":"))} if outcome["audit"] else {}


# ------------------------------------------------------------------ CEL

def _cel():
    import celpy   # third-party (requirements-dev.txt); imported when a policy is written or evaluated
    return celpy


def _join(values, separator=""):
    return _cel().celtypes.StringType(str(separator).join(str(value) for value in values))


def _split(text, separator):
    celtypes = _cel().celtypes
    return celtypes.ListType([celtypes.StringType(part) for part in str(text).split(str(separator))])


def _string_function(method):
    return lambda text: _cel().celtypes.StringType(method(str(text)))


def _functions() -> dict:
    return {"join": _join, "split": _split, "lowerAscii": _string_function(str.lower),
            "upperAscii": _string_function(str.upper), "trim": _string_function(str.strip)}


def _program(expression: str):
    """The compiled program of one expression (cached by its text); CelError when it does not compile."""
    with _programs_lock:
        program = _programs.get(expression)
        if program is None:
            celpy = _cel()
            environment = celpy.Environment()
            try:
                program = environment.program(environment.compile(expression), functions=_functions())
            except celpy.CELParseError as error:
                raise CelError("compilation failed: %s" % str(error).strip()) from error
            _programs[expression] = program
    return program


def evaluate(expression: str, activation: dict):
    """The Python value of ``expression`` over ``activation`` (celpy values); CelError when it fails."""
    celpy = _cel()
    try:
        return _program(expression).evaluate(activation)
    except celpy.CELEvalError as error:
        raise CelError(str(error.args[0]) if error.args else str(error)) from error


def _boolean(expression: str, activation: dict) -> bool:
    result = evaluate(expression, activation)
    if not isinstance(result, _cel().celtypes.BoolType):
        raise CelError("expression '%s' resulted in non-boolean value %r" % (expression, result))
    return bool(result)


def check_policy(policy: dict) -> None:
    """What the API server refuses when a policy is written: an expression that does not compile (422)."""
    spec = policy.get("spec") or {}
    fields = [("spec.matchConditions[%d].expression" % index, item.get("expression"))
              for index, item in enumerate(spec.get("matchConditions") or [])]
    fields += [("spec.variables[%d].expression" % index, item.get("expression"))
               for index, item in enumerate(spec.get("variables") or [])]
    for index, item in enumerate(spec.get("validations") or []):
        fields.append(("spec.validations[%d].expression" % index, item.get("expression")))
        if item.get("messageExpression"):
            fields.append(("spec.validations[%d].messageExpression" % index, item["messageExpression"]))
    for field, expression in fields:
        try:
            _program(expression or "")
        except CelError as error:
            name = (policy.get("metadata") or {}).get("name", "")
            raise ApiError(422, "Invalid", 'ValidatingAdmissionPolicy.admissionregistration.k8s.io "%s" is invalid: '
                           '%s: Invalid value: "%s": %s' % (name, field, expression, error),
                           {"name": name, "group": "admissionregistration.k8s.io",
                            "kind": "ValidatingAdmissionPolicy"}) from error


# ------------------------------------------------------------------ matching

def _rule_matches(rule: dict, attributes: dict) -> bool:
    def listed(values, value):
        return "*" in (values or []) or value in (values or [])

    if not (listed(rule.get("apiGroups"), attributes["group"]) and
            listed(rule.get("apiVersions"), attributes["version"]) and
            listed(rule.get("operations"), attributes["operation"])):
        return False
    resource, subresource = attributes["resource"], attributes["subresource"]
    wanted = resource + ("/" + subresource if subresource else "")
    resources = rule.get("resources") or []
    if not (wanted in resources or ("*" in resources and not subresource) or "*/*" in resources or
            (subresource and resource + "/*" in resources) or (subresource and "*/" + subresource in resources)):
        return False
    scope = rule.get("scope") or "*"
    if scope != "*" and scope != ("Namespaced" if attributes["namespace"] else "Cluster"):
        return False
    names = rule.get("resourceNames") or []
    return not names or attributes["name"] in names


def _selector_matches(selector: Optional[dict], labels) -> bool:
    try:
        return label_selector_from_object(selector if selector is not None else {}).matches(labels)
    except SelectorError:
        return False


def _matches(match: Optional[dict], attributes: dict, namespace_labels: Optional[dict], require_rules: bool) -> bool:
    """A policy's matchConstraints (rules required) or a binding's matchResources (unset: all)."""
    if match is None:
        return not require_rules
    rules = match.get("resourceRules")
    if rules is not None or require_rules:
        if not any(_rule_matches(rule, attributes) for rule in rules or []):
            return False
    if any(_rule_matches(rule, attributes) for rule in match.get("excludeResourceRules") or []):
        return False
    objects = [obj for obj in (attributes["object"], attributes["oldObject"]) if obj]
    if not any(_selector_matches(match.get("objectSelector"), (obj.get("metadata") or {}).get("labels"))
               for obj in objects):
        return False
    if namespace_labels is None:   # cluster-scoped: the namespace selector does not apply
        return True
    return _selector_matches(match.get("namespaceSelector"), namespace_labels)


# ------------------------------------------------------------------ admission

def _forbidden(attributes: dict, reason: str, text: str) -> ApiError:
    info = RESOURCES.get(attributes["key"]) or {}
    name = attributes["name"] or "Unknown"
    qualified = info.get("plural", attributes["resource"]) + ("." + attributes["group"] if attributes["group"] else "")
    # admission.NewForbidden with the validation's reason and code, the denial repeated as the one cause (kubectl
    # prints an Invalid one as 'The pods "x" is invalid: : ValidatingAdmissionPolicy ...')
    return ApiError(_REASON_CODES.get(reason, 400), reason, '%s "%s" is forbidden: %s' % (qualified, name, text),
                    {"name": name, "group": attributes["group"], "kind": attributes["resource"],
                     "causes": [{"message": text}]})


def _message(validation: dict, activation: dict) -> str:
    if validation.get("messageExpression"):
        try:
            text = evaluate(validation["messageExpression"], activation)
            if isinstance(text, str) and text.strip() and "\n" not in text:
                return str(text)
        except CelError:
            pass
    return validation.get("message") or "failed expression: %s" % validation.get("expression", "")


def _evaluate_policy(policy: dict, activation: dict) -> Optional[List[Tuple[int, str, str]]]:
    """None when the matchConditions skip the policy, else the failures (expression index, message, reason)."""
    spec = policy.get("spec") or {}
    for condition in spec.get("matchConditions") or []:
        if not _boolean(condition["expression"], activation):
            return None
    celtypes = _cel().celtypes
    variables = celtypes.MapType({})
    activation["variables"] = variables
    for variable in spec.get("variables") or []:
        variables[celtypes.StringType(variable["name"])] = evaluate(variable["expression"], activation)
    failures = []
    for index, validation in enumerate(spec.get("validations") or []):
        if not _boolean(validation["expression"], activation):
            failures.append((index, _message(validation, activation), validation.get("reason") or "Invalid"))
    return failures


def admit(attributes: dict, policies: Dict[str, dict], bindings: List[dict],
          namespace_of: Callable[[str], Optional[dict]]) -> None:
    """Run every binding on one request. ``attributes``: key (storage key), group, version, resource,
    subresource, operation (CREATE/UPDATE/DELETE), namespace, name, object, oldObject, dryRun.
    ``namespace_of(name)``: the Namespace object, None when absent. Raises the Deny; records Warn and Audit."""
    if not bindings:
        return
    namespace = attributes["namespace"]
    namespace_object = namespace_of(namespace) if namespace else None
    if attributes["key"] == "namespaces":
        namespace_object = attributes["object"] or attributes["oldObject"]
    namespace_labels = ((namespace_object or {}).get("metadata") or {}).get("labels") or {} \
        if (namespace or attributes["key"] == "namespaces") else None
    activation = None
    for binding in sorted(bindings, key=lambda item: item["metadata"]["name"]):
        spec = binding.get("spec") or {}
        policy = policies.get(spec.get("policyName") or "")
        if policy is None or (policy.get("spec") or {}).get("paramKind"):
            continue
        if not (_matches((policy.get("spec") or {}).get("matchConstraints"), attributes, namespace_labels, True) and
                _matches(spec.get("matchResources"), attributes, namespace_labels, False)):
            continue
        if activation is None:
            activation = _activation(attributes, namespace_object)
        actions = spec.get("validationActions") or []
        policy_name, binding_name = policy["metadata"]["name"], binding["metadata"]["name"]
        try:
            failures = _evaluate_policy(policy, dict(activation))
        except CelError as error:
            if (policy.get("spec") or {}).get("failurePolicy", "Fail") == "Ignore":
                continue
            failures = [(-1, "expression evaluation failed: %s" % error, "Invalid")]
        for index, message, reason in failures or []:
            _act(attributes, actions, policy_name, binding_name, index, message, reason)


def _act(attributes: dict, actions: List[str], policy_name: str, binding_name: str, index: int, message: str,
         reason: str) -> None:
    outcome = _outcome()
    if "Audit" in actions and outcome is not None:
        outcome["audit"].append({"message": message, "policy": policy_name, "binding": binding_name,
                                 "expressionIndex": index, "validationActions": actions})
    if "Warn" in actions and outcome is not None:
        outcome["warnings"].append("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s"
                                   % (policy_name, binding_name, message))
    if "Deny" in actions:
        raise _forbidden(attributes, reason, "ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s"
                         % (policy_name, binding_name, message))


def _activation(attributes: dict, namespace_object: Optional[dict]) -> dict:
    celpy = _cel()
    request = {"operation": attributes["operation"], "namespace": attributes["namespace"] or "",
               "name": attributes["name"] or "", "dryRun": bool(attributes.get("dryRun")),
               "kind": {"group": attributes["group"], "version": attributes["version"],
                        "kind": (RESOURCES.get(attributes["key"]) or {}).get("kind", "")},
               "resource": {"group": attributes["group"], "version": attributes["version"],
                            "resource": attributes["resource"]},
               "subResource": attributes["subresource"] or ""}
    return {"object": celpy.json_to_cel(attributes["object"]), "oldObject": celpy.json_to_cel(attributes["oldObject"]),
            "request": celpy.json_to_cel(request), "namespaceObject": celpy.json_to_cel(namespace_object)}
