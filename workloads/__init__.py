"""kchaos: workloads stage."""
