"""gpulab: the fleet twin of gpuops.nvidia (GPU node twins over real SSH and a Kubernetes API twin).

Run it as ``PYTHONPATH=lab python -m gpulab up --state-dir DIR --nodes 3``. See ``lab/README.md`` and
``lab/ARCHITECTURE.md``.
"""
from __future__ import annotations

__version__ = "0.1.0"
