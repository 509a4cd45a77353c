"""kchaos: the PySpark checker, the same results.json as checkers/reference.py at any scale.

- ``engine.check_run_with(engine, run_dir, spark_master)``: the one place that
  picks Spark or the reference (``kchaos run/check --engine``).
- ``checker``: the stages and the results dict; ``reader``: the history as
  checked, cached DataFrames; ``judge``: the anomalies as grouped shuffles and
  a window; ``examples``: the 20 smallest findings with their whole lines;
  ``session``: a SparkSession sized for this machine, or a cluster's.

Nothing here imports pyspark at module level except through these functions,
so ``--engine python`` never pays for it.
"""
