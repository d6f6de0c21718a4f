"""The NVIDIA layer as the node core calls it: ``<backend>.<module>.<function>`` (backend ``gpulab.nvidia`` unless
``up --nvidia-backend`` names another package with the same API, see lab/ARCHITECTURE.md "NVIDIA layer API")."""
from __future__ import annotations

import importlib


def nvidia_function(backend: str, dotted: str):
    """``backend.<module>.<function>``; ImportError/AttributeError when the layer does not provide it."""
    module_name, function_name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module("%s.%s" % (backend, module_name)), function_name)
