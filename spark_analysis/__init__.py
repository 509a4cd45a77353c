"""kchaos: the PySpark checker, the same results.json as checkers/reference.py at any scale.

- ``engine.check_run_with(engine, run_dir, spark_master)``: the one place that
  picks Spark or the reference (``kchaos run/check --engine``).
- ``checker``: the stages and the results dict; ``columnar``: a JSONL file
  converted to Parquet with Arrow, by the reference reader's rules;
  ``cache``: those Parquet files beside the JSONL, rebuilt when it changes;
  ``columnar_reader``: the history for Spark from the caches; ``reader``: the
  history parsed by Spark from the JSON lines (the fallback), as checked,
  cached DataFrames; ``encode``: names as ids; ``judge``: the anomalies as
  grouped shuffles and a window; ``examples``: the 20 smallest findings with
  their whole lines; ``session``: a SparkSession sized for this machine, or
  a cluster's; ``class_archive``: the JVM's archive of the classes a check
  loads, which ``make_class_archive`` makes at set-up.

Nothing here imports pyspark at module level except through these functions,
so ``--engine python`` never pays for it.
"""
