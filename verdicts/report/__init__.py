"""The per-run report: RUN/report.html, one self-contained page an operator opens after a run.

One module per job: ``settings`` (what the durability settings promise),
``scan`` (the one streaming pass over the history), ``figure`` (the
timeline), ``examples`` (results.json's examples for a person) and ``page``
(the page and ``kchaos report``). Other modules import from here, never from
the submodules.
"""

from verdicts.report.page import report_cmd, templates, write_report
from verdicts.report.scan import NS, bucket_ms, latency_bucket, scan_history
from verdicts.report.settings import durability_config, promises

__all__ = ["NS", "bucket_ms", "durability_config", "latency_bucket", "promises", "report_cmd", "scan_history",
           "templates", "write_report"]
