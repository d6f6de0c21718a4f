"""Kubernetes twin: `api/` (the API machinery real kubectl and the Python client talk to) and `sim/` (GPU nodes,
kubelets, device plugin and controllers built on it); `testing.py` is for tests only (see README.md)."""
