"""The kchaos command line: every error a user can cause is one line and exit 2."""

from __future__ import annotations

import argparse
import logging
import sys

import docker.errors

from clusters.errors import ClusterError
from clusters.image import DEFAULT_KAFKA_VERSION
from harness import cluster_cmd
from harness.errors import EXIT_HARNESS, HarnessError, install_termination_handlers


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kchaos", description="Jepsen-style fault injection for Apache Kafka")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the harness does")
    sub = parser.add_subparsers(dest="command", required=True)

    cluster = sub.add_parser("cluster", help="start, inspect and remove a cluster by hand")
    csub = cluster.add_subparsers(dest="action", required=True)
    up = csub.add_parser("up", help="start a cluster and keep it until `kchaos cluster down`")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--zookeepers", type=int, default=3)
    up.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    up.add_argument("--json", action="store_true", help="print nodes, IPs and roles as JSON")
    for name, text in (("status", "show nodes and the leaders/ISR of each topic"),
                       ("down", "remove the cluster(s) and everything they left behind")):
        p = csub.add_parser(name, help=text)
        p.add_argument("--id", dest="cluster_id", help="which cluster (default: the newest / all for down)")
    return parser


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "cluster":
        if args.action == "up":
            return cluster_cmd.up(args.brokers, args.zookeepers, args.kafka_version, args.json)
        if args.action == "status":
            return cluster_cmd.status(args.cluster_id)
        return cluster_cmd.down(args.cluster_id)
    raise AssertionError(args.command)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s: %(message)s")
    install_termination_handlers()
    try:
        return dispatch(args)
    except (HarnessError, ClusterError) as e:
        print(f"kchaos: {e}", file=sys.stderr)
    except docker.errors.DockerException as e:
        print(f"kchaos: Docker engine error ({e}); is dockerd running? `make setup` starts it", file=sys.stderr)
    except KeyboardInterrupt:
        print("kchaos: interrupted", file=sys.stderr)
    return EXIT_HARNESS


if __name__ == "__main__":
    sys.exit(main())
