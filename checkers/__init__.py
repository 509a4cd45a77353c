"""kchaos: checkers stage."""
