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
