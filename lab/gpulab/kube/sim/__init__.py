"""What models GPU nodes and their control plane on top of `gpulab.kube.api`: kubelets, the NVIDIA device
plugin, controllers, scheduler, the API-only fleet, the records checker and `KubeCluster` (see ../README.md)."""
