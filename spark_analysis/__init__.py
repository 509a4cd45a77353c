"""kchaos: spark_analysis stage."""
