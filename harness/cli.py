"""The kchaos command line: every error a user can cause is one line and exit 2."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import docker.errors

from clusters.errors import ClusterError
from clusters.image import DEFAULT_KAFKA_VERSION
from clusters.spec import ClusterSpec
from harness import cluster_cmd
from harness.run import run_scenario
from harness.scenario import load_scenario
from harness.matrix import write_matrix
from harness.nightly import nightly
from harness.report import report_cmd
from harness.verdict import judge
from spark_analysis.engine import DEFAULT_ENGINE, ENGINES
from harness.errors import EXIT_HARNESS, EXIT_VALID, HarnessError, Terminated, install_termination_handlers


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kchaos", description="Jepsen-style fault injection for Apache Kafka")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the harness does")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a scenario and check it")
    run.add_argument("scenario", type=Path)
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario key, e.g. --set workload.duration_s=30")
    run.add_argument("--seed", type=int)
    run.add_argument("--out", type=Path, default=Path("runs"), help="where run directories go (default runs/)")

    check = sub.add_parser("check", help="check an existing run directory again")
    check.add_argument("run_dir", type=Path)
    for command in (run, check):
        command.add_argument("--engine", choices=ENGINES, default=DEFAULT_ENGINE,
                             help="checker: spark (default, any size) or python (the reference, small runs)")
        command.add_argument("--spark-master", metavar="URL",
                             help="run the Spark checker on this cluster, e.g. spark://host:7077 "
                                  "(default: SPARK_MASTER, else local mode on every core)")

    report = sub.add_parser("report", help="write RUN/report.html from RUN/results.json and the history")
    report.add_argument("run_dir", type=Path)

    matrix = sub.add_parser("matrix", help="write RUNS_ROOT/index.html, the reliability matrix of every run")
    matrix.add_argument("runs_root", type=Path)

    nightly = sub.add_parser("nightly", help="run every scenario marked nightly, build the matrix, write JUnit XML")
    nightly.add_argument("--scenarios", type=Path, default=Path("scenarios"), help="folder of scenario files")
    nightly.add_argument("--out", type=Path, default=Path("runs"), help="where run directories go (default runs/)")
    nightly.add_argument("--junit", type=Path, help="JUnit XML file (default OUT/junit.xml)")

    cluster = sub.add_parser("cluster", help="start, inspect and remove a cluster by hand")
    csub = cluster.add_subparsers(dest="action", required=True)
    up = csub.add_parser("up", help="start a cluster and keep it until `kchaos cluster down`")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--metadata", choices=("zookeeper", "kraft"), default="zookeeper",
                    help="ZooKeeper ensemble or dedicated KRaft controllers (Kafka 4.x: kraft only)")
    up.add_argument("--zookeepers", type=int, default=3, help="ZooKeeper nodes (zookeeper mode)")
    up.add_argument("--controllers", type=int, default=3, help="dedicated KRaft controllers (kraft mode)")
    up.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    up.add_argument("--json", action="store_true", help="print nodes, IPs and roles as JSON")
    for name, text in (("status", "show nodes and the leaders/ISR of each topic"),
                       ("down", "remove the cluster(s) and everything they left behind")):
        p = csub.add_parser(name, help=text)
        p.add_argument("--id", dest="cluster_id", help="which cluster (default: the newest / all for down)")
    return parser


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        scenario = load_scenario(args.scenario, args.overrides, args.seed)
        outcome = run_scenario(scenario, args.out)
        print(f"run directory: {outcome.run_dir}")
        code = judge(outcome.run_dir, args.engine, args.spark_master)
        if outcome.harness_error:
            raise HarnessError(outcome.harness_error)
        return code
    if args.command == "check":
        return judge(args.run_dir, args.engine, args.spark_master)
    if args.command == "report":
        return report_cmd(args.run_dir)
    if args.command == "matrix":
        path = write_matrix(args.runs_root)
        print(f"matrix: {path}")
        return EXIT_VALID
    if args.command == "nightly":
        return nightly(args.scenarios, args.out, args.junit or args.out / "junit.xml")
    if args.command == "cluster":
        if args.action == "up":
            return cluster_cmd.up(ClusterSpec(kafka_version=args.kafka_version, metadata=args.metadata,
                                              brokers=args.brokers, zookeepers=args.zookeepers,
                                              controllers=args.controllers), args.json)
        if args.action == "status":
            return cluster_cmd.status(args.cluster_id)
        return cluster_cmd.down(args.cluster_id)
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
    except docker.errors.DockerException as e:
        print(f"kchaos: Docker engine error ({e}); is dockerd running? `make setup` starts it", file=sys.stderr)
    except KeyboardInterrupt:
        print("kchaos: interrupted (SIGINT); what was started has been torn down", file=sys.stderr)
    except Terminated as e:
        print(f"kchaos: stopped by {e}; what was started has been torn down", file=sys.stderr)
    return EXIT_HARNESS


if __name__ == "__main__":
    sys.exit(main())
