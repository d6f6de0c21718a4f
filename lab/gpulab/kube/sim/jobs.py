"""The Job controller (batch/v1) and the TTL-after-finished controller, as kube-controller-manager runs them.

NonIndexed jobs: up to `parallelism` pods at a time until `completions` succeeded (without `completions`, a
work queue: done once a pod succeeded and none is left running); failed pods count
against `backoffLimit` (with restartPolicy OnFailure their container restarts count too, as upstream), and a
failure delays the next pod by the controller's back-off (10 s doubling, capped at 6 min; `backoff_s` in
tests); `activeDeadlineSeconds`. A finished Job gets the 1.31+ condition pairs (`SuccessCriteriaMet` then
`Complete`; `FailureTarget` then `Failed`), `completionTime` on success, its active pods deleted, and is
deleted with its pods `ttlSecondsAfterFinished` after it finished. Finished pods are counted from the pods
that remain (the twin has no job-tracking finalizers): a finished pod deleted by hand is not counted.
"""
from __future__ import annotations

from ..api.errors import ApiError
from ..api.eviction import controller_owner
from ..api.timefmt import parse_rfc3339, rfc3339
from .objects import meta, pod_is_terminating
from .workloads import pods_by_owner_uid, status_differs

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
MAX_BACKOFF_S = 360.0


def job_counts(pods: list, restart_policy: str) -> dict:
    """succeeded, failed (pods Failed, plus container restarts of live pods under OnFailure), active."""
    succeeded = sum(1 for pod in pods if _phase(pod) == "Succeeded")
    failed = sum(1 for pod in pods if _phase(pod) == "Failed")
    active = [pod for pod in pods if _phase(pod) not in ("Succeeded", "Failed") and not pod_is_terminating(pod)]
    restarts = 0
    if restart_policy == "OnFailure":
        restarts = sum(int(status.get("restartCount") or 0) for pod in active
                       for status in (pod.get("status") or {}).get("containerStatuses") or [])
    ready = sum(1 for pod in active for condition in (pod.get("status") or {}).get("conditions") or []
                if condition.get("type") == "Ready" and condition.get("status") == "True")
    return {"succeeded": succeeded, "failed": failed + restarts, "failed_pods": failed, "active": active,
            "ready": ready, "terminating": sum(1 for pod in pods if pod_is_terminating(pod))}


def finished_condition(job: dict):
    """The Job's Complete or Failed condition when it has finished, else None."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return condition
    return None


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def _condition(kind: str, reason: str, message: str, when: str) -> dict:
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": when, "lastTransitionTime": when}


class JobController:
    """Runs on the ControllerManager's thread; `manager` gives the informer and the store writes."""

    def __init__(self, manager, backoff_s: float = 10.0):
        self.manager = manager
        self.backoff_s = backoff_s

    def sync(self, now: float) -> None:
        pods_by_owner = pods_by_owner_uid(self.manager.informer.items("pods"))
        for job in self.manager.informer.items("jobs"):
            if meta(job).get("deletionTimestamp"):
                continue
            pods = [pod for pod in pods_by_owner.get(meta(job).get("uid"), [])
                    if (controller_owner(pod) or {}).get("kind") == "Job"]
            finished = finished_condition(job)
            if finished is not None:
                self._after_finish(job, finished, pods, now)
            else:
                self._sync_job(job, pods, now)

    def _sync_job(self, job: dict, pods: list, now: float) -> None:
        spec = job.get("spec") or {}
        status = dict(job.get("status") or {})
        template = spec.get("template") or {}
        restart_policy = (template.get("spec") or {}).get("restartPolicy") or "Never"
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        backoff_limit = int(spec.get("backoffLimit", 6))
        counts = job_counts(pods, restart_policy)
        start_time = status.get("startTime") or rfc3339(now)
        when = rfc3339(now)
        ending = None
        work_queue_done = completions is None and counts["succeeded"] > 0 and not counts["active"]
        if work_queue_done or (completions is not None and counts["succeeded"] >= int(completions)):
            ending = ("SuccessCriteriaMet", "Complete", "CompletionsReached",
                      "Reached expected number of succeeded pods")
        elif counts["failed"] > backoff_limit:
            ending = ("FailureTarget", "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif spec.get("activeDeadlineSeconds") is not None and \
                now - self._started_epoch(job, now) >= int(spec["activeDeadlineSeconds"]):
            ending = ("FailureTarget", "Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
        if ending is not None:
            for pod in counts["active"]:
                self.manager.delete("pods", pod)
            interim, final, reason, message = ending
            new_status = {"startTime": start_time, "active": 0, "succeeded": counts["succeeded"],
                          "failed": counts["failed"], "ready": 0, "terminating": counts["terminating"],
                          "uncountedTerminatedPods": {},
                          "conditions": [_condition(interim, reason, message, when),
                                         _condition(final, reason, message, when)]}
            if final == "Complete":
                new_status["completionTime"] = when
            self._write_status(job, new_status)
            self.manager.record_event(job, "Completed" if final == "Complete" else reason,
                                      "Job completed" if final == "Complete" else message,
                                      event_type="Normal" if final == "Complete" else "Warning",
                                      component="job-controller")
            return
        wanted = parallelism
        if completions is None and counts["succeeded"] > 0:
            wanted = 0                   # a work queue: once one pod succeeded, the others finish the queue
        elif completions is not None:
            wanted = min(parallelism, int(completions) - counts["succeeded"])
        if spec.get("suspend"):
            wanted = 0
        missing = wanted - len(counts["active"])
        if missing > 0 and now >= self._next_pod_at(pods, counts["failed_pods"]):
            for _ in range(missing):
                try:
                    self.manager.create_pod(job, self._pod_template(job))
                except ApiError as error:   # refused (admission, quota): upstream's FailedCreate event
                    self.manager.record_event(job, "FailedCreate", "Error creating: " + error.message, "Warning",
                                              "job-controller")
                    break
        self._write_status(job, {"startTime": start_time, "active": len(counts["active"]),
                                 "succeeded": counts["succeeded"], "failed": counts["failed"],
                                 "ready": counts["ready"], "terminating": counts["terminating"],
                                 "uncountedTerminatedPods": {}})

    def _started_epoch(self, job: dict, now: float) -> float:
        start = (job.get("status") or {}).get("startTime")
        return parse_rfc3339(start) if start else now

    def _next_pod_at(self, pods: list, failed_pods: int) -> float:
        """After N failed pods the controller waits backoff_s * 2**(N-1) (capped) from the last failure."""
        if failed_pods == 0:
            return 0.0
        finished = [parse_rfc3339(status["state"]["terminated"]["finishedAt"])
                    for pod in pods if _phase(pod) == "Failed"
                    for status in (pod.get("status") or {}).get("containerStatuses") or []
                    if ((status.get("state") or {}).get("terminated") or {}).get("finishedAt")]
        if not finished:
            return 0.0
        return max(finished) + min(MAX_BACKOFF_S, self.backoff_s * 2 ** (failed_pods - 1))

    def _pod_template(self, job: dict) -> dict:
        template = dict(job["spec"].get("template") or {})
        template_meta = dict(template.get("metadata") or {})
        labels = dict(template_meta.get("labels") or {})
        labels.setdefault(JOB_NAME_LABEL, meta(job)["name"])
        labels.setdefault(CONTROLLER_UID_LABEL, meta(job).get("uid"))
        labels.setdefault("job-name", meta(job)["name"])
        labels.setdefault("controller-uid", meta(job).get("uid"))
        template_meta["labels"] = labels
        template["metadata"] = template_meta
        return template

    def _write_status(self, job: dict, status: dict) -> None:
        if status_differs(job.get("status") or {}, status):
            self.manager.patch("jobs", job, {"status": status}, subresource="status")

    def _after_finish(self, job: dict, finished: dict, pods: list, now: float) -> None:
        """Active pods of a finished Job go; `ttlSecondsAfterFinished` deletes the Job and its pods."""
        for pod in pods:
            if _phase(pod) not in ("Succeeded", "Failed") and not pod_is_terminating(pod):
                self.manager.delete("pods", pod)
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        if now >= parse_rfc3339(finished["lastTransitionTime"]) + int(ttl):
            self.manager.delete("jobs", job)
