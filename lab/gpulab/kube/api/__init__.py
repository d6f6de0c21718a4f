"""Kubernetes API machinery any Kubernetes twin needs: object store, HTTPS server, patches, selectors,
discovery, protobuf bodies, TLS, records, kubeconfig, Table printers, object defaults, PodDisruptionBudget
arithmetic and eviction (API-server behaviour). Imports nothing from `gpulab.kube.sim` (see ../README.md)."""
