"""gpuops: the audited entry point of the gpuops.nvidia runbooks (see docs/runner.md)."""

__version__ = "0.1.0"
