"""The breakdown's tallies per partition, learnt while a history file is converted: no Spark job reads them.

results.json's ``breakdown`` counts per partition the acknowledged sends and
the live and final reads, and its ``series`` the acknowledged sends per
second (checkers/breakdown.py, checkers/series.py). These are counts of lines
by a few columns: the conversion counts each block's (Arrow's group-by) and
keeps the sums in the cache's footer, keyed by topic name, so that they add
up across blocks and across a cluster's ranges alike. Send files count their
lines by (topic, partition, ok, second of an ok line's complete_ns: null
when unknown or not ok), so that a partition only failed sends name still
has its row; read files count theirs by (topic, partition, final). When some message was
sent twice, only its winning line counts: then the footer's ok lines are
not the acks, and breakdown.partition_tallies runs its job as before.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from checkers.series import SECOND_NS
from spark_analysis.encode import OK

Key = tuple[Any, ...]  # (topic, partition, ok, second or None) of a send; (topic, partition, final) of a read


@dataclass
class Tallies:
    """Lines counted by (topic, partition, ok, second) for a send file, (topic, partition, final) for a read
    file."""

    counts: Counter[Key] = field(default_factory=Counter)

    def add(self, stored: pa.Table, topics: list[str]) -> None:
        """A block of columnar.stored_table rows of sends.jsonl (they have a status) or reads.jsonl; ``topics``
        names its topic ids."""
        if "status" not in stored.column_names:
            self._count({"tid": stored["tid"], "partition": stored["partition"], "final": stored["final"]}, topics)
            return
        ok = pc.equal(stored["status"], OK)
        ns = stored["complete_ns"]
        seconds = np.floor_divide(pc.fill_null(ns, 0).to_numpy(), SECOND_NS)  # floor: as checkers.series.second_of
        untimed = pc.or_(pc.invert(ok), pc.is_null(ns)).to_numpy(zero_copy_only=False)
        self._count({"tid": stored["tid"], "partition": stored["partition"], "ok": ok,
                     "second": pa.array(seconds, pa.int64(), mask=untimed)}, topics)

    def _count(self, columns: dict[str, Any], topics: list[str]) -> None:
        grouped = pa.table(columns).group_by(list(columns), use_threads=False).aggregate([([], "count_all")])
        for tid, *key, n in zip(*(grouped[c].to_pylist() for c in (*columns, "count_all"))):
            self.counts[(topics[tid], *key)] += n

    def follow(self, later: "Tallies") -> None:
        """The next range's counts (ranged.py merges its parts)."""
        self.counts.update(later.counts)

    def to_json(self) -> str:
        return json.dumps([[*key, n] for key, n in self.counts.items()])

    @staticmethod
    def from_json(text: str) -> "Tallies":
        return Tallies(Counter({tuple(entry[:-1]): entry[-1] for entry in json.loads(text)}))


def partition_tallies(sends: Tallies, reads: Tallies | None, topic_ids: dict[str, int]
                      ) -> tuple[dict[tuple[int, Any], Counter[str]], list[tuple[int, Any, int, int]]]:
    """What breakdown.partition_tallies' job returns, from two files' footers: (tid, partition) -> acked,
    reads_live, reads_final; and the acked per (tid, partition, second)."""
    totals: dict[tuple[int, Any], Counter[str]] = {}
    per_second = []
    for (topic, partition, ok, second), n in sends.counts.items():
        part = (topic_ids[topic], partition)
        totals.setdefault(part, Counter())["acked"] += n if ok else 0
        if second is not None:
            per_second.append((*part, second, n))
    for (topic, partition, final), n in (reads.counts.items() if reads is not None else ()):
        totals.setdefault((topic_ids[topic], partition), Counter())["reads_final" if final else "reads_live"] += n
    return totals, per_second
