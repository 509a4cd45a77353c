"""kchaos: clusters stage."""
