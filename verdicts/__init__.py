"""The offline stages: everything that only reads a run directory.

Expectations and the verdict (``kchaos check``), the report (``kchaos
report``), the matrix (``kchaos matrix``) and the nightly's summary and
JUnit. They read what the run wrote through ``rundir`` and import nothing
from clusters/, workloads/ or faults/: a run directory copied to a laptop
without Docker or librdkafka can still be judged and reported.
"""
