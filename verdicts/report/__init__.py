"""The per-run report: RUN/report.html, one self-contained page an operator opens after a run.

One module per job: ``settings`` (what the durability settings promise and
allow), ``scan`` (the one streaming pass over the history), ``windows`` (fault
windows: down, recovering, which fault a moment belongs to), ``latency``
(every send's latency, packed for the page), ``isr`` (one leadership strip
per partition), ``figure`` (the timeline), ``headline`` (the sentence and the
anomalies as overlapping sets), ``chains`` (results.json's forensics),
``logs`` (the node-log lines embedded), ``examples`` (results.json's examples
for a person) and ``page`` (the page and ``kchaos report``). Other modules
import from here, never from the submodules.
"""

from verdicts.report.headline import TARGET_WORDS, percent
from verdicts.report.page import report_cmd, templates, write_report
from verdicts.report.scan import NS, scan_history, use_series
from verdicts.report.settings import allowance, durability_config, planned_faults, promises

__all__ = ["NS", "TARGET_WORDS", "allowance", "durability_config", "percent", "planned_faults", "promises",
           "report_cmd", "scan_history", "templates", "use_series", "write_report"]
