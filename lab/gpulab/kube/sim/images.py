"""Which container images the twin's registries hold, and what a failed pull says.

The twin has no registry: a container "runs" on the node's own root filesystem whatever its image. What it
decides is only whether the image could be pulled at all, so that a pod naming an image that does not exist
fails as on a real cluster (`ErrImagePull`, then `ImagePullBackOff`) instead of running:

- Docker Hub's `library/` namespace (a name without a `/`) holds only the Docker Official Images, whose names
  are short words of `[a-z0-9]` joined by `-` or `.` (20 characters at most: `ibm-semeru-runtimes`,
  `eclipse-temurin`): a name of another shape (`i_made_this_up`, `adslfkjadslfkjadslkfjsadf`) is refused as
  Docker Hub refuses it (`pull access denied, repository does not exist or may require authorization`). The
  twin does not list the Official Images themselves: any name of their shape is pulled (`busybox`, and the short
  names tests use). Every other registry and Docker Hub namespace (`nvcr.io/nvidia/...`, `registry.k8s.io/...`,
  `vllm/vllm-openai`) is taken to hold the repository.
- a tag that is a version number with a component of more than 9 digits (`nginx:1.0.23449928384992872784`,
  `fluentd:v2734894949`) names no release of anything (a release number is short; a date stamp has 8 digits):
  the registry answers `not found`.

The messages are containerd's CRI errors as the kubelet copies them into the container's waiting state
(`rpc error: code = ... desc = failed to pull and unpack image "REF": failed to resolve reference "REF": ...`).
"""
from __future__ import annotations

import re

from ..api.timefmt import rfc3339
from .objects import meta
from .pods import container_id, pod_status_base

DOCKER_HUB = "docker.io"

OFFICIAL_NAME = re.compile(r"^[a-z0-9]+(?:[.-][a-z0-9]+)*$")
OFFICIAL_NAME_MAX = 20
_VERSION_TAG = re.compile(r"^v?\d+(?:\.\d+)*(?:[-+_].*)?$")
_LONG_NUMBER = re.compile(r"\d{10,}")


def normalize(image: str) -> str:
    """The fully qualified reference containerd resolves (`busybox` -> `docker.io/library/busybox:latest`)."""
    name, digest = (image.split("@", 1) + [""])[:2]
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        registry, path = DOCKER_HUB, name
    else:
        registry, path = first, rest
    if registry == DOCKER_HUB and "/" not in path:
        path = "library/" + path
    last = path.rsplit("/", 1)[-1]
    if ":" not in last and not digest:
        path += ":latest"
    return "%s/%s%s" % (registry, path, "@" + digest if digest else "")


def pull_error(image: str):
    """None when the twin's registries hold `image`; else the CRI error of the pull (the container's
    `ErrImagePull` message)."""
    if not image:
        return None
    reference = normalize(image)
    registry, path = reference.split("/", 1)
    repository = re.split(r"[:@]", path.rsplit("/", 1)[-1], maxsplit=1)[0]
    tag = path.rsplit("/", 1)[-1].partition(":")[2] if "@" not in path else ""
    if registry == DOCKER_HUB and path.startswith("library/") and (
            len(repository) > OFFICIAL_NAME_MAX or not OFFICIAL_NAME.match(repository)):
        return ('rpc error: code = Unknown desc = failed to pull and unpack image "%s": failed to resolve reference '
                '"%s": pull access denied, repository does not exist or may require authorization: server message: '
                'insufficient_scope: authorization failed' % (reference, reference))
    if tag and _VERSION_TAG.match(tag) and _LONG_NUMBER.search(tag):
        return ('rpc error: code = NotFound desc = failed to pull and unpack image "%s": failed to resolve reference '
                '"%s": %s: not found' % (reference, reference, reference))
    return None


def back_off_message(image: str) -> str:
    """The waiting message while the kubelet backs off pulling `image` again (reason ImagePullBackOff)."""
    return 'Back-off pulling image "%s"' % image


class ImagePulls:
    """The kubelet's side: pods with a container whose image cannot be pulled (`failing`), their status."""

    def __init__(self, kubelet):
        self.kubelet = kubelet

    def failing(self, pod: dict, now: float) -> bool:
        """A container whose image cannot be pulled never starts: `ErrImagePull` at each pull attempt, then
        `ImagePullBackOff` until the next one (the kubelet's image back-off doubles as the crash back-off
        does, 10 s to 5 min upstream). The pod stays Pending and not Ready, so a wait on it fails."""
        containers = (pod.get("spec") or {}).get("containers") or []
        errors = {c.get("name"): pull_error(c.get("image") or "") for c in containers}
        if not any(errors.values()):
            return False
        kubelet, client = self.kubelet, self.kubelet.client
        uid = meta(pod).get("uid")
        runtime = kubelet._runtime.get(uid)
        if runtime is None or runtime.get("state") != "pulling":
            runtime = kubelet._runtime[uid] = {"attempt": 0, "restart_count": 0, "started_at": now,
                                               "needs_restart": False, "next_attempt": now, "state": "pulling",
                                               "pulls": 0, "reason": None}
        failed = [c for c in containers if errors.get(c.get("name"))]
        if now >= runtime["next_attempt"]:
            runtime["pulls"] += 1
            backoff_s = min(kubelet.config.max_crash_backoff_s,
                            kubelet.config.crash_backoff_s * (2 ** (runtime["pulls"] - 1)))
            runtime.update(next_attempt=now + backoff_s, reason="ErrImagePull",
                           back_off_at=now + backoff_s / 2)     # ErrImagePull shown half the back-off
            for container in failed:
                image = container.get("image")
                client.record_event(pod, "Pulling", 'Pulling image "%s"' % image, component="kubelet")
                client.record_event(pod, "Failed", 'Failed to pull image "%s": %s' % (
                    image, errors[container.get("name")]), "Warning", component="kubelet")
                client.record_event(pod, "Failed", "Error: ErrImagePull", "Warning", component="kubelet")
            self._write(pod, runtime, errors, now)
        elif runtime["reason"] == "ErrImagePull" and now >= runtime["back_off_at"]:
            runtime["reason"] = "ImagePullBackOff"
            for container in failed:
                client.record_event(pod, "BackOff", back_off_message(container.get("image")), component="kubelet")
            self._write(pod, runtime, errors, now)
        return True

    def _write(self, pod: dict, runtime: dict, errors: dict, now: float) -> None:
        """Containers whose image failed wait (ErrImagePull with the CRI error, or ImagePullBackOff); the
        others of the pod run."""
        statuses = []
        for container in (pod.get("spec") or {}).get("containers") or []:
            error = errors.get(container.get("name"))
            status = {"name": container.get("name"), "image": container.get("image", ""), "imageID": "",
                      "ready": False, "started": False, "restartCount": 0, "lastState": {}}
            if not error:
                status.update(containerID=container_id(meta(pod).get("uid"), 0), ready=True, started=True,
                              state={"running": {"startedAt": rfc3339(runtime["started_at"])}})
            elif runtime["reason"] == "ErrImagePull":
                status["state"] = {"waiting": {"reason": "ErrImagePull", "message": error}}
            else:
                status["state"] = {"waiting": {"reason": "ImagePullBackOff",
                                               "message": back_off_message(container.get("image"))}}
            statuses.append(status)
        pod_status = pod_status_base(pod, now, False, self.kubelet.node_ip)
        running = any(status.get("started") for status in statuses)
        pod_status.update({"phase": "Running" if running else "Pending", "containerStatuses": statuses})
        self.kubelet.client.patch("pods", pod, {"status": pod_status}, subresource="status")
