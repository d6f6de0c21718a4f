# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Who holds the rollout lock, and what a request for it does: pure decisions of rollout_lock over a
coordination.k8s.io/v1 Lease.

``lease_state(lease, now)`` reads a Lease (holder, acquired/renewed/expiry times, expired?);
``decide(lease, request, now)`` returns a ``Decision``: ``action`` (``create``, ``update``, ``none``, ``fail``), the
Lease ``body`` to write (carrying the read resourceVersion, so a concurrent writer gets 409 and we decide again), a
``message`` and whether it ``changed`` anything. The Lease's ``leaseDurationSeconds`` is the ttl; the lock expires
``ttl`` seconds after its last ``renewTime``.

Proof of holding: ``holderIdentity`` is for people (operator, host, run id) and anyone can present it again, e.g. a
second run started with the first run's run id. A request may carry ``token_sha256``, the SHA-256 of a secret only
its run has (``token_sha256_of``); the Lease keeps it in the ``gpuops.nvidia/holder-token-sha256`` annotation and
the lock is ours only when both the holder and the hash match (compared in constant time). A steal of an expired
lock is written into the ``gpuops.nvidia/lock-stolen`` annotation: by whom, when, from whom, expired since when.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json

from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.meta import json_annotation
from ansible_collections.gpuops.nvidia.plugins.module_utils.k8s.timestamps import (
    format_micro_time,
    format_time,
    parse_time,
)

MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by'
MANAGED_BY = 'gpuops.nvidia'
TOKEN_ANNOTATION = 'gpuops.nvidia/holder-token-sha256'
STOLEN_ANNOTATION = 'gpuops.nvidia/lock-stolen'


def token_sha256_of(token):
    """The hex SHA-256 of a holder token (a random secret of 256 bits needs no salt), None without a token."""
    return hashlib.sha256(token.encode('utf-8')).hexdigest() if token else None


def _annotations(lease):
    return ((lease or {}).get('metadata') or {}).get('annotations') or {}


def _proves_possession(lease, token_sha256):
    """Whether the request holds the token whose hash the Lease keeps (no token on either side also matches: a
    lock taken without a token is held by its holder name alone)."""
    kept = _annotations(lease).get(TOKEN_ANNOTATION)
    if not kept or not token_sha256:
        return not kept and not token_sha256
    return hmac.compare_digest(kept.encode('ascii', 'replace'), token_sha256.encode('ascii', 'replace'))


def default_holder(user, host, run_id):
    """``user@host/run_id``: who holds the lock, and which run of theirs."""
    return '%s@%s/%s' % (user or 'unknown', host or 'unknown', run_id)


def lease_state(lease, now):
    """holder (None when free), acquired_at, renewed_at, expires_at (epoch seconds), ttl, expired, transitions."""
    spec = (lease or {}).get('spec') or {}
    holder = spec.get('holderIdentity') or None
    acquired = parse_time(spec.get('acquireTime'))
    renewed = parse_time(spec.get('renewTime')) or acquired
    ttl = spec.get('leaseDurationSeconds')
    expires = renewed + ttl if renewed is not None and ttl else None
    return {'holder': holder, 'acquired_at': acquired, 'renewed_at': renewed, 'expires_at': expires, 'ttl': ttl,
            'expired': holder is not None and expires is not None and now >= expires,
            'transitions': spec.get('leaseTransitions') or 0}


def describe(state):
    """'alice@bastion/run-1 since 2026-12-03T03:00:00Z (expires 2026-12-03T04:00:00Z)'"""
    return '%s since %s (%s %s)' % (state['holder'], format_time(state['acquired_at']) or 'unknown',
                                    'expired' if state['expired'] else 'expires',
                                    format_time(state['expires_at']) or 'never')


class Decision:
    def __init__(self, action, message, body=None, changed=False):
        self.action = action
        self.message = message
        self.body = body
        self.changed = changed
        self.stolen = None   # by, at, from, expired_at when this decision takes over an expired lock

    def __repr__(self):
        return 'Decision(%r, %r)' % (self.action, self.message)


def decide(lease, request, now):
    """What to do with the Lease (None: it does not exist) for ``request``: state (acquired, renewed, released),
    name, namespace, holder, ttl, steal_expired and token_sha256 (optional)."""
    wanted = request['state']
    holder = request['holder']
    state = lease_state(lease, now)
    same_name = state['holder'] == holder
    ours = same_name and _proves_possession(lease, request.get('token_sha256'))
    stealing = wanted == 'acquired' and state['expired'] and request.get('steal_expired')
    if same_name and not ours and not stealing:
        return Decision('fail', 'lock %s is held by %s, the holder this run names, but this run does not hold its '
                                'token (another run started with the same run id?); %s' % (
                                    _where(request), describe(state), _not_ours_remedy(state)))
    if wanted == 'acquired':
        if lease is None:
            return Decision('create', 'acquired', _new_lease(request, now), changed=True)
        if state['holder'] is None:
            return Decision('update', 'acquired (the lock was free)', _take(lease, request, now), changed=True)
        if ours and not state['expired']:
            return Decision('none', 'already held by %s' % describe(state))
        if ours:
            return Decision('update', 'acquired again (our own lock had expired)', _take(lease, request, now, False),
                            changed=True)
        if stealing:
            stolen = {'by': holder, 'at': format_time(now), 'from': state['holder'],
                      'expired_at': format_time(state['expires_at'])}
            decision = Decision('update', 'took over the expired lock of %s' % describe(state),
                                _take(lease, request, now, stolen=stolen), changed=True)
            decision.stolen = stolen
            return decision
        if state['expired']:
            return Decision('fail', 'lock %s is held by %s; set steal_expired: true to take it over'
                            % (_where(request), describe(state)))
        return Decision('fail', 'lock %s is held by %s' % (_where(request), describe(state)))
    if wanted == 'renewed':
        if lease is None or state['holder'] is None:
            return Decision('fail', 'cannot renew lock %s: nobody holds it' % _where(request))
        if not ours:
            return Decision('fail', 'cannot renew lock %s as %s: it is held by %s' % (
                _where(request), holder, describe(state)))
        return Decision('update', 'renewed', _renew(lease, request, now), changed=True)
    if wanted == 'released':
        if lease is None or state['holder'] is None:
            return Decision('none', 'already released')
        if not ours:
            return Decision('fail', 'cannot release lock %s as %s: it is held by %s' % (
                _where(request), holder, describe(state)))
        return Decision('update', 'released', _release(lease), changed=True)
    raise ValueError('unknown state %r' % wanted)


def _not_ours_remedy(state):
    if state['expired']:
        return 'it expired: take it over with steal_expired: true'
    return 'wait until it expires or ask its holder'


def _where(request):
    return '%s/%s' % (request['namespace'], request['name'])


def _new_lease(request, now):
    stamp = format_micro_time(now)
    metadata = {'name': request['name'], 'namespace': request['namespace'], 'labels': {MANAGED_BY_LABEL: MANAGED_BY}}
    if request.get('token_sha256'):
        metadata['annotations'] = {TOKEN_ANNOTATION: request['token_sha256']}
    return {'apiVersion': 'coordination.k8s.io/v1', 'kind': 'Lease', 'metadata': metadata,
            'spec': {'holderIdentity': request['holder'], 'leaseDurationSeconds': request['ttl'],
                     'acquireTime': stamp, 'renewTime': stamp, 'leaseTransitions': 0}}


def _take(lease, request, now, new_holder=True, stolen=None):
    body = copy.deepcopy(lease)
    annotations = body.setdefault('metadata', {}).setdefault('annotations', {})
    _set_or_drop(annotations, TOKEN_ANNOTATION, request.get('token_sha256'))
    if stolen:
        annotations[STOLEN_ANNOTATION] = json.dumps(stolen, sort_keys=True)
    spec = body.setdefault('spec', {})
    stamp = format_micro_time(now)
    if new_holder and spec.get('holderIdentity') != request['holder']:
        spec['leaseTransitions'] = (spec.get('leaseTransitions') or 0) + 1
    spec.update(holderIdentity=request['holder'], leaseDurationSeconds=request['ttl'], acquireTime=stamp,
                renewTime=stamp)
    return body


def _renew(lease, request, now):
    body = copy.deepcopy(lease)
    body['spec'].update(renewTime=format_micro_time(now), leaseDurationSeconds=request['ttl'])
    return body


def _set_or_drop(annotations, key, value):
    if value:
        annotations[key] = value
    else:
        annotations.pop(key, None)


def _release(lease):
    body = copy.deepcopy(lease)
    _annotations(body).pop(TOKEN_ANNOTATION, None)
    for key in ('holderIdentity', 'acquireTime', 'renewTime'):
        body['spec'][key] = None
    return body


def result_of(lease, now):
    """What the module returns about the lock: holder, acquired_at, renewed_at, expires_at (RFC 3339), ttl,
    expired, transitions, last_steal (the Lease's record of the last take-over of an expired lock, or None)."""
    state = lease_state(lease, now)
    return {'holder': state['holder'], 'acquired_at': format_time(state['acquired_at']),
            'renewed_at': format_time(state['renewed_at']), 'expires_at': format_time(state['expires_at']),
            'ttl': state['ttl'], 'expired': state['expired'], 'transitions': state['transitions'],
            'last_steal': json_annotation(lease or {}, STOLEN_ANNOTATION)}
