"""The kchaos command line: every error a user can cause is one line and exit 2."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, NoReturn

from catalogue.exits import EXIT_HARNESS, HarnessError
from clusters.errors import ClusterError
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION
from forensics.command import forensics_cmd
from harness.errors import Terminated, install_termination_handlers
from harness.shard import Shard, parse_shard
from rundir.layout import JUNIT
from rundir.versions import kchaos_version
from spark_analysis.engine import DEFAULT_ENGINE, ENGINES
from spark_analysis.server import DEFAULT_PORT, spark_cmd
from spark_analysis.session import is_remote
from verdicts.merge import matrix_cmd
from verdicts.report import report_cmd
from verdicts.verdict import judge

EXIT_CODES = """\
exit codes:
  0  run, check, nightly: the verdict meets the scenario's expect: block (or is valid when it has none);
     explore: no finding, and some trial was judged; any other command: done
  1  run, check, nightly: the verdict does not meet it (a regression or a surprise); explore: a finding
  2  not judged: bad input (one line on stderr), or the harness could not do its job
     (a fault not applied, a cluster never ready, a run cut short, a history missing or incomplete)
"""


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit 2, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_HARNESS, f"kchaos: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="kchaos", description="Jepsen-style fault injection for Apache Kafka",
                    epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"kchaos {kchaos_version()}",
                        help="print kchaos's version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the harness does")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a scenario and check it", epilog=EXIT_CODES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("scenario", type=Path, help="the scenario file (YAML), e.g. scenarios/acks1-leader-kill.yaml")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario key, e.g. --set workload.duration_s=30 (repeatable)")
    run.add_argument("--seed", type=int, help="the seed of the fault schedule (default: the scenario's)")
    run.add_argument("--out", type=Path, default=Path("runs"), help="where run directories go (default runs/)")

    validate = sub.add_parser("validate", help="check a scenario file as run would, starting nothing",
                              epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    validate.add_argument("scenario", type=Path, help="the scenario file (YAML)")
    validate.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                          help="override a scenario key, as for run (repeatable)")

    check = sub.add_parser("check", help="check an existing run directory again", epilog=EXIT_CODES,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("run_dir", type=Path, help="a run directory, runs/<scenario>/<timestamp>")
    for command in (run, check):
        command.add_argument("--engine", choices=ENGINES, default=DEFAULT_ENGINE,
                             help="checker: spark (default, any size) or python (the reference, small runs)")
        where = command.add_mutually_exclusive_group()
        where.add_argument("--spark-master", metavar="URL",
                           help="run the Spark checker on this cluster, e.g. spark://host:7077 "
                                "(default: SPARK_MASTER, else the server of `kchaos spark up` when it is up, "
                                "else local mode on every core)")
        where.add_argument("--spark-remote", metavar="URL",
                           help="check through this Spark Connect server, e.g. sc://host:15002 (default: "
                                "SPARK_REMOTE); its executors must see the run directory at the same path")

    report = sub.add_parser("report", help="write RUN/report.html from RUN/results.json and the history")
    report.add_argument("run_dir", type=Path, help="a checked run directory, runs/<scenario>/<timestamp>")

    forensics = sub.add_parser("forensics", help="parse RUN/logs/ into RUN/history/broker-events.jsonl "
                               "(elections, ISR changes, truncations, recovery), on the run's time line")
    forensics.add_argument("run_dir", type=Path, help="a run directory with logs/, runs/<scenario>/<timestamp>")

    matrix = sub.add_parser("matrix", help="write RUNS_ROOT/index.html, the reliability matrix of every run; "
                            "several roots (a sharded nightly's folders) are merged into one first")
    matrix.add_argument("runs_root", type=Path, nargs="+", metavar="RUNS_ROOT",
                        help="a folder of run directories, e.g. runs; with several, every run directory and nightly "
                             "record is copied (hard-linked where possible) into the output root")
    matrix.add_argument("--out", type=Path, help="the output root (default: the first RUNS_ROOT)")
    matrix.add_argument("--junit", type=Path, metavar="FILE",
                        help="also write the nightly's JUnit file from the merged outcome records "
                             "(and the GitHub step summary when GITHUB_STEP_SUMMARY is set)")

    nightly = sub.add_parser("nightly", help="run every scenario marked nightly, build the matrix, write JUnit XML")
    nightly.add_argument("--scenarios", type=Path, default=Path("scenarios"),
                         help="folder of scenario files (default scenarios/)")
    nightly.add_argument("--out", type=Path, default=Path("runs"), help="where run directories go (default runs/)")
    nightly.add_argument("--junit", type=Path, help="JUnit XML file (default OUT/junit.xml)")
    nightly.add_argument("--shard", type=shard_arg, metavar="K/N",
                         help="run only shard K of N (1 <= K <= N), balanced by expected duration; every shard "
                              "computes the same partition, `kchaos matrix` merges their folders")
    nightly.add_argument("--kafka-version", action="append", default=[], metavar="V",
                         help="run every nightly scenario on this Kafka release (repeat for several: versions "
                              "as an axis; pairs a release cannot run, ZooKeeper on 4.x, are left out)")
    nightly.add_argument("--client-version", action="append", default=[], metavar="V",
                         help="and with this workload.client_version (a confluent-kafka release for librdkafka "
                              "scenarios, a kafka-clients one for Java ones; repeat for several)")

    explore = sub.add_parser("explore", help="draw trials from a space of faults and settings, run them within a "
                             "budget, shrink each finding to the smallest scenario that still shows it",
                             epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    explore.add_argument("space", type=Path, help="the space file (YAML), e.g. spaces/acks1-known-loss.yaml")
    explore.add_argument("--budget-min", type=float, default=30, metavar="N",
                         help="start no run that could end after N minutes (default 30)")
    explore.add_argument("--seed", type=int, default=1, help="the seed every draw comes from (default 1)")
    explore.add_argument("--out", type=Path, help="the exploration's folder (default runs/explore/<space>/<time>)")
    explore.add_argument("--junit", type=Path, metavar="FILE", help="the JUnit file (a finding fails it; default "
                         "OUT/junit.xml)")
    explore.add_argument("--engine", choices=ENGINES, help="the checker each trial's run uses (default: run's)")
    explore.add_argument("--trials", type=int, metavar="N", help="draw at most N trials (each finding is still "
                         "shrunk and confirmed)")

    spark = sub.add_parser("spark", help="start, inspect and stop the warm checker server (Spark Connect) that "
                           "checks go through while it is up")
    ssub = spark.add_subparsers(dest="action", required=True, metavar="ACTION")
    spark_up = ssub.add_parser("up", help="start the server on this machine and warm it (nothing if it is up)")
    spark_up.add_argument("--port", type=int, default=DEFAULT_PORT,
                          help=f"the loopback port it listens on (default {DEFAULT_PORT})")
    spark_up.add_argument("--master", default="local[*]",
                          help="where its jobs run (default local[*]; or spark://host:7077)")
    spark_up.add_argument("--no-warm", dest="warm", action="store_false",
                          help="do not check a made-up run through it first")
    ssub.add_parser("status", help="say whether it is up, where, and since when")
    ssub.add_parser("down", help="stop it and remove its shuffle files")

    cluster = sub.add_parser("cluster", help="start, inspect and remove a cluster by hand")
    csub = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = csub.add_parser("up", help="start a cluster and keep it until `kchaos cluster down`")
    up.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    up.add_argument("--metadata", choices=("zookeeper", "kraft"), default="zookeeper",
                    help="ZooKeeper ensemble or dedicated KRaft controllers (Kafka 4.x: kraft only)")
    up.add_argument("--zookeepers", type=int, default=3, help="ZooKeeper nodes (zookeeper mode)")
    up.add_argument("--controllers", type=int, default=3, help="dedicated KRaft controllers (kraft mode)")
    up.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION,
                    help=f"Kafka release whose jars the nodes run (default {DEFAULT_KAFKA_VERSION})")
    up.add_argument("--json", action="store_true", help="print nodes, IPs and roles as JSON")
    for name, text in (("status", "show nodes and the leaders/ISR of each topic"),
                       ("down", "remove the cluster(s) and everything they left behind")):
        p = csub.add_parser(name, help=text)
        p.add_argument("--id", dest="cluster_id", help="which cluster (default: the newest / all for down)")
    return parser


def shard_arg(text: str) -> Shard:
    """--shard K/N, refused in one line like any other usage error."""
    try:
        return parse_shard(text)
    except HarnessError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--shard ")) from None


def directory(path: Path, what: str) -> Path:
    """``path`` if it is an existing directory; else a one-line HarnessError saying what was expected."""
    if not path.exists():
        raise HarnessError(f"{path}: no such directory (expected {what})")
    if not path.is_dir():
        raise HarnessError(f"{path}: not a directory (expected {what})")
    return path


def writable_root(path: Path) -> Path:
    """An output folder: a directory or a path still to create, never an existing file."""
    if path.exists() and not path.is_dir():
        raise HarnessError(f"{path}: not a directory (the folder run directories go into)")
    return path


def spark_at(args: argparse.Namespace) -> str | None:
    """Where the Spark checker runs: --spark-remote's Connect URL, else --spark-master's (the checker tells them
    apart by the sc:// scheme; spark_analysis/session.py's remote_url)."""
    if args.spark_remote is not None and not is_remote(args.spark_remote):
        raise HarnessError(f"--spark-remote {args.spark_remote}: not a Spark Connect URL (sc://host:port)")
    return args.spark_remote or args.spark_master


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "check":
        return judge(directory(args.run_dir, "a run directory"), args.engine, spark_at(args))
    if args.command == "report":
        return report_cmd(directory(args.run_dir, "a run directory"))
    if args.command == "forensics":
        return forensics_cmd(directory(args.run_dir, "a run directory"))
    if args.command == "spark":
        return spark_cmd(args.action, **{k: getattr(args, k) for k in ("port", "master", "warm") if hasattr(args, k)})
    if args.command == "matrix":
        roots = [directory(root, "a folder of run directories") for root in args.runs_root]
        return matrix_cmd(roots, writable_root(args.out) if args.out else roots[0], args.junit)
    # The commands that start clusters load Docker, librdkafka and Testcontainers, and only they: the offline
    # ones above run on a machine that has a run directory and none of those.
    from harness import commands

    with commands.docker_errors_in_one_line():
        return cluster_command(args, commands)


def cluster_command(args: argparse.Namespace, commands: Any) -> int:
    """The commands that start clusters (``commands``: harness/commands.py, loaded by ``dispatch``)."""
    from harness.nightly import nightly

    if args.command == "validate":
        return commands.validate(args.scenario, args.overrides)
    if args.command == "run":
        return commands.run(args.scenario, args.overrides, args.seed, writable_root(args.out), args.engine,
                            spark_at(args))
    if args.command == "nightly":
        return nightly(directory(args.scenarios, "a folder of scenario files"), writable_root(args.out),
                       args.junit or args.out / JUNIT, shard=args.shard,
                       kafka_versions=tuple(dict.fromkeys(args.kafka_version)),
                       client_versions=tuple(dict.fromkeys(args.client_version)))
    if args.command == "explore":
        from harness.explore.explorer import explore, default_folder
        return explore(args.space, args.budget_min, args.seed,
                       writable_root(args.out) if args.out else default_folder(args.space), args.junit, args.engine,
                       args.trials)
    if args.command == "cluster":
        return commands.cluster(args.action, args)
    raise AssertionError(args.command)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s: %(message)s")
    if not args.verbose:  # a broker down is the point of the exercise, not news
        logging.getLogger("rdkafka").setLevel(logging.CRITICAL)
    install_termination_handlers()
    try:
        return dispatch(args)
    except (HarnessError, ClusterError) as e:
        print(f"kchaos: {e}", file=sys.stderr)
    except OSError as e:  # a file or folder the harness could not read or write: the operator's to fix
        print(f"kchaos: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print("kchaos: interrupted (SIGINT); what was started has been torn down", file=sys.stderr)
    except Terminated as e:
        print(f"kchaos: stopped by {e}; what was started has been torn down", file=sys.stderr)
    return EXIT_HARNESS


if __name__ == "__main__":
    sys.exit(main())
