"""Up to 20 examples per anomaly, chosen and shown exactly as the reference checker does.

The choice: per anomaly the smallest findings, messages by (producer, seq[,
group]) first, then positions by (topic, partition, offset). All anomalies
are tagged in one pass over the message and position tables and ranked with
one window (Spark keeps only the top 20 of each anomaly per task before the
shuffle), so the driver receives at most 20 rows per anomaly.

The showing: an example's send is the winning send line; its reads are its
first ten reads in file order; a divergent or foreign position shows an ack
there that some read there contradicts, else any ack there, smallest
(producer, seq) first. These few lines are found by their position keys and
fetched from the files (see ``fetch_lines``), then parsed with the
reference's own line parser, so each example holds the whole line, unknown
fields included.

The tables carry ids (encode.py); ids are ordered as names are, so the
ranking is done on ids and only the chosen few are named.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from catalogue.anomalies import ANOMALIES
from rundir.lines import parse_json_line
from checkers.polls import SEND_ANOMALY
from checkers.reference import MAX_EXAMPLE_READS, MAX_EXAMPLES

from spark_analysis.encode import FAIL, Names, literal_table, sql_in
from spark_analysis.judge import FLAGS, outcome_name
from spark_analysis.reader import FileRead, Source, text_lines

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Msg = tuple[int, int]  # (pid, seq)
Pos = tuple[int, int, int]  # (tid, partition, offset)

# Message anomalies flagged by a boolean column of the message table.
FLAGGED = tuple(flag for flag in FLAGS if flag in ANOMALIES)


def candidates(messages: "DataFrame", positions: "DataFrame", reordered: "DataFrame | None",
               backwards: "DataFrame | None" = None) -> "DataFrame":
    """Every finding as one row: anomaly, kind (0 message, 1 position), sort key (s1, n1, s2, n2), send_key."""
    flags = ", ".join(f"named_struct('a', '{a}', 'on', {a}, 'g', CAST(NULL AS INT))" for a in FLAGGED)
    anything = " OR ".join([*FLAGGED, "size(skipped) > 0", "size(redelivered) > 0"])
    msg = messages.filter(anything).selectExpr(
        "pid", "seq", "send_key",
        f"""explode(concat(
                filter(array({flags}), x -> x.on),
                transform(skipped, g -> named_struct('a', 'consumer_skipped', 'on', true, 'g', g)),
                transform(redelivered, g -> named_struct('a', 'consumer_redelivered', 'on', true, 'g', g)))) AS x""",
    ).selectExpr("x.a AS anomaly", "0 AS kind", "pid AS s1", "seq AS n1", "x.g AS s2",
                 "CAST(NULL AS BIGINT) AS n2", "send_key")
    pos = positions.filter("divergent OR foreign").selectExpr(
        "tid", "`partition`", "`offset`",
        """explode(concat(CASE WHEN divergent THEN array('divergent') ELSE array() END,
                          CASE WHEN foreign THEN array('unexpected') ELSE array() END)) AS anomaly""",
    ).selectExpr("anomaly", "1 AS kind", "tid AS s1", "`partition` AS n1", "CAST(NULL AS INT) AS s2",
                 "`offset` AS n2", "CAST(NULL AS BIGINT) AS send_key")
    found = msg.unionByName(pos)
    for anomaly, rows in (("reordered", reordered), (SEND_ANOMALY, backwards)):  # (pid, seq, send_key) rows
        if rows is not None:
            found = found.unionByName(rows.selectExpr(
                f"'{anomaly}' AS anomaly", "0 AS kind", "pid AS s1", "seq AS n1", "CAST(NULL AS INT) AS s2",
                "CAST(NULL AS BIGINT) AS n2", "send_key"))
    return found


def smallest(found: "DataFrame") -> dict[str, list[dict[str, Any]]]:
    """The 20 smallest findings of each anomaly, messages before positions (the reference's choose_examples)."""
    from pyspark.sql import Window, functions as F

    rank = Window.partitionBy("anomaly").orderBy("kind", "s1", "n1", "s2", "n2")
    rows = (found.withColumn("_rank", F.row_number().over(rank))
            .filter(F.col("_rank") <= MAX_EXAMPLES).drop("_rank").collect())
    chosen: dict[str, list[dict[str, Any]]] = {a: [] for a in ANOMALIES}
    for row in rows:
        chosen[row["anomaly"]].append(row.asDict())
    for findings in chosen.values():
        findings.sort(key=lambda r: (r["kind"], r["s1"], r["n1"], -1 if r["s2"] is None else r["s2"], r["n2"] or 0))
    return chosen


def examples(spark: "SparkSession", chosen: dict[str, list[dict[str, Any]]], reads: "DataFrame",
             acks: "DataFrame", sends_file: Source, reads_file: Source | None,
             names: Names) -> dict[str, list[dict[str, Any]]]:
    """The examples of results.json for the chosen findings, with their whole send and read lines."""
    wanted_msgs = {(r["s1"], r["n1"]) for rs in chosen.values() for r in rs if r["kind"] == 0}
    wanted_pos = {(r["s1"], r["n1"], r["n2"]) for rs in chosen.values() for r in rs if r["kind"] == 1}
    outputs = _outputs(spark, reads, {(r["s1"], r["n1"]) for r in chosen["pipeline_duplicated"]})
    wanted_pos |= {pos for positions in outputs.values() for pos in positions}
    msg_send = {(r["s1"], r["n1"]): r["send_key"] for rs in chosen.values() for r in rs
                if r["kind"] == 0 and r["send_key"] is not None}
    msg_reads, pos_reads, pos_msgs, pos_acks = _lookups(spark, reads, acks, wanted_msgs, wanted_pos)
    pos_send = _acks_at(pos_acks, pos_msgs)

    send_keys = set(msg_send.values()) | set(pos_send.values())
    read_keys = {k for ks in (*msg_reads.values(), *pos_reads.values()) for k in ks}
    if reads_file is None:
        [send_lines], read_lines = fetch_lines(spark, [sends_file], [send_keys]), {}
    else:
        send_lines, read_lines = fetch_lines(spark, [sends_file, reads_file], [send_keys, read_keys])

    def message_example(r: dict[str, Any]) -> dict[str, Any]:
        msg = (r["s1"], r["n1"])
        example: dict[str, Any] = {"producer": names.producers[r["s1"]], "seq": r["n1"]}
        if r["s2"] is not None:
            example["group"] = names.groups[r["s2"]]
        example["send"] = send_lines.get(msg_send[msg]) if msg in msg_send else None
        example["reads"] = [read_lines[k] for k in msg_reads.get(msg, []) if k in read_lines]
        return example

    def position_example(r: dict[str, Any], anomaly: str) -> dict[str, Any]:
        pos = (r["s1"], r["n1"], r["n2"])
        head = {"producer": None, "seq": None} if anomaly == "unexpected" else {}
        return {**head, "topic": names.topics[pos[0]], "partition": pos[1], "offset": pos[2],
                "send": send_lines.get(pos_send[pos]) if pos in pos_send else None,
                "reads": [read_lines[k] for k in pos_reads.get(pos, []) if k in read_lines]}

    found = {a: [message_example(r) if r["kind"] == 0 else position_example(r, a) for r in chosen[a]]
             for a in ANOMALIES}
    for r, example in zip(chosen["pipeline_duplicated"], found["pipeline_duplicated"]):
        example["outputs"] = [read_lines[k] for pos in outputs[(r["s1"], r["n1"])] for k in pos_reads.get(pos, [])[:1]
                              if k in read_lines]
    return found


def _outputs(spark: "SparkSession", reads: "DataFrame", msgs: set[Msg]) -> dict[Msg, list[Pos]]:
    """The positions of each input message's output records in the read_committed read-back, in order (the
    reference's ``outputs``, shown with a pipeline_duplicated example)."""
    from pyspark.sql import functions as F

    if not msgs:
        return {}
    keys = literal_table(spark, [("fpid", "int"), ("fseq", "bigint")], sorted(msgs))
    rows = (reads.filter("pid IS NOT NULL AND final AND committed")
            .join(F.broadcast(keys), ["fpid", "fseq"], "left_semi")
            .select("fpid", "fseq", "tid", "partition", "offset").distinct().collect())
    found: dict[Msg, list[Pos]] = {msg: [] for msg in msgs}
    for r in rows:
        found[(r["fpid"], r["fseq"])].append((r["tid"], r["partition"], r["offset"]))
    return {msg: sorted(positions) for msg, positions in found.items()}


def torn_examples(spark: "SparkSession", torn: list[dict[str, Any]], members: "DataFrame", missing: "DataFrame",
                  names: Names) -> list[dict[str, Any]]:
    """The reference's torn_transaction examples for these rows of ``judge.transaction_table`` (the smallest
    (pid, txn) first): the seqs read_committed readers saw and those they did not, 20 of each, smallest first.

    ``members`` and ``missing`` are those ``transaction_table`` was given; the
    visible members are the members not missing. One job for all of them.
    """
    from pyspark.sql import Window, functions as F

    if not torn:
        return []
    keys = F.broadcast(literal_table(spark, [("pid", "int"), ("txn", "bigint")], [(t["pid"], t["txn"]) for t in torn]))
    lacking = missing.join(keys, ["pid", "txn"], "left_semi").select("pid", "seq", "txn")
    # the txn numbers first: a producer's transactions follow each other in the file, so the Parquet statistics
    # skip most of it
    seen = (members.filter(f"{sql_in('txn', sorted({t['txn'] for t in torn}))} AND status <> {FAIL}")
            .join(keys, ["pid", "txn"], "left_semi")
            .select("pid", "seq", "txn").join(lacking, ["pid", "seq", "txn"], "left_anti"))
    first = Window.partitionBy("missing", "pid", "txn").orderBy("seq")
    rows = (seen.withColumn("missing", F.lit(False)).unionByName(lacking.withColumn("missing", F.lit(True)))
            .withColumn("_n", F.row_number().over(first)).filter(F.col("_n") <= MAX_EXAMPLES).collect())
    seqs: dict[tuple[bool, int, int], list[int]] = defaultdict(list)
    for r in rows:
        seqs[(r["missing"], r["pid"], r["txn"])].append(r["seq"])
    return [{"producer": names.producers[t["pid"]], "txn": t["txn"], "outcome": outcome_name(t["code"]),
             "visible_count": t["members"] - t["missing"], "missing_count": t["missing"],
             "visible": sorted(seqs[(False, t["pid"], t["txn"])]), "missing": sorted(seqs[(True, t["pid"], t["txn"])])}
            for t in torn]


def _lookups(spark: "SparkSession", reads: "DataFrame", acks: "DataFrame", msgs: set[Msg], positions: set[Pos]) \
        -> tuple[dict[Msg, list[int]], dict[Pos, list[int]], dict[Pos, set[Msg | None]], list[tuple[Pos, Msg, int]]]:
    """In one job: each wanted message's first ten reads, each wanted position's first ten reads, the
    messages read at each wanted position (None: foreign) and the acks there (position, message, send key).

    Reads come back as position keys, in file order. The reads are scanned
    once: the rows with a wanted seq or offset are cached, both lookups join those.
    """
    from pyspark import StorageLevel
    from pyspark.sql import Window, functions as F

    # one scan of the reads for both kinds of lookup: the few rows with a wanted seq or offset
    near = reads.filter(f"{sql_in('seq', sorted({seq for _, seq in msgs}))} "
                        f"OR {sql_in('offset', sorted({offset for _, _, offset in positions}))}")
    near = near.persist(StorageLevel.MEMORY_AND_DISK)
    parts: list[DataFrame] = []
    if msgs:
        keys = literal_table(spark, [("pid", "int"), ("seq", "bigint")], sorted(msgs))
        first = Window.partitionBy("pid", "seq").orderBy("_key")
        parts.append(near.join(F.broadcast(keys), ["pid", "seq"], "left_semi")
                     .withColumn("_n", F.row_number().over(first)).filter(F.col("_n") <= MAX_EXAMPLE_READS)
                     .selectExpr("'m' AS tag", "tid", "`partition`", "`offset`", "pid", "seq", "_key", "_n"))
    if positions:
        keys = literal_table(spark, [("tid", "int"), ("partition", "bigint"), ("offset", "bigint")], sorted(positions))
        at = ["tid", "partition", "offset"]
        first = Window.partitionBy(*at).orderBy("_key")
        first_of_value = Window.partitionBy(*at, "pid", "seq").orderBy("_key")
        parts.append(near.join(F.broadcast(keys), at, "left_semi")
                     .withColumn("_n", F.row_number().over(first))
                     .withColumn("_v", F.row_number().over(first_of_value))
                     .filter(f"_n <= {MAX_EXAMPLE_READS} OR _v = 1")
                     .selectExpr("'p' AS tag", "tid", "`partition`", "`offset`", "pid", "seq", "_key", "_n"))
        parts.append(acks.join(F.broadcast(keys), at, "left_semi")
                     .selectExpr("'a' AS tag", "tid", "`partition`", "`offset`", "pid", "seq",
                                 "send_key AS _key", "0 AS _n"))
    rows = []
    try:
        if parts:
            union = parts[0]
            for part in parts[1:]:
                union = union.unionByName(part)
            rows = sorted(union.collect(), key=lambda r: (r["tag"], r["_key"]))
    finally:
        near.unpersist()
    msg_reads: dict[Msg, list[int]] = defaultdict(list)
    pos_reads: dict[Pos, list[int]] = defaultdict(list)
    pos_msgs: dict[Pos, set[Msg | None]] = defaultdict(set)
    pos_acks: list[tuple[Pos, Msg, int]] = []
    for r in rows:
        pos = (r["tid"], r["partition"], r["offset"])
        msg = None if r["pid"] is None else (r["pid"], r["seq"])
        if r["tag"] == "m":
            msg_reads[msg].append(r["_key"])  # type: ignore[index]
        elif r["tag"] == "p":
            pos_msgs[pos].add(msg)
            if r["_n"] <= MAX_EXAMPLE_READS:
                pos_reads[pos].append(r["_key"])
        else:
            pos_acks.append((pos, msg, r["_key"]))  # type: ignore[arg-type]
    return msg_reads, pos_reads, pos_msgs, pos_acks


def _acks_at(acks: list[tuple[Pos, Msg, int]], read_there: dict[Pos, set[Msg | None]]) -> dict[Pos, int]:
    """Send key of the ack to show at each position: one a read there contradicts, else the smallest message."""
    best: dict[Pos, tuple[tuple[bool, Msg], int]] = {}
    for pos, msg, send_key in acks:  # the acks at the wanted positions, read there or not
        rank = (read_there.get(pos, set()) <= {msg}, msg)  # False (contradicted) sorts first
        if pos not in best or rank < best[pos][0]:
            best[pos] = (rank, send_key)
    return {pos: key for pos, (_, key) in best.items()}


def fetch_lines(spark: "SparkSession", files: list[Source], keys: list[set[int]]) -> list[dict[int, dict[str, Any]]]:
    """The whole lines with these position keys, file by file, parsed as the reference parses them.

    Lines of JSON files read by Spark (``FileRead``) are found by one filtered
    text scan of them all; a Parquet-cached file finds its own (``lines``).
    """
    found: list[dict[int, dict[str, Any]]] = [{} for _ in files]
    parts = []
    for i, (f, ks) in enumerate(zip(files, keys)):
        if not ks:
            continue
        if isinstance(f, FileRead):
            parts.append(text_lines(spark, f.path).filter(sql_in("_key", sorted(ks)))
                         .selectExpr(f"{i} AS file", "_key", "CAST(value AS binary) AS raw"))
        else:
            found[i] = f.lines(ks)  # type: ignore[attr-defined]
    if not parts:
        return found
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    for r in union.collect():
        found[r["file"]][r["_key"]] = parse_json_line(bytes(r["raw"]))
    return found
