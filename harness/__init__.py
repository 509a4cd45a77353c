"""kchaos: harness stage."""
