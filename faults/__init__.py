"""kchaos: faults stage."""
