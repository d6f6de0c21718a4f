"""Kubernetes API twin: an in-process store and an HTTPS API server that real kubectl and the official
Python client accept (see README.md)."""
