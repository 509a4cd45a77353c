"""What ``make setup`` prepares for each Kafka version: the node image, its setting names, the Java workload.

``python -m clusters.prepare [--kafka-version V ...]`` (scripts/setup.sh);
each is cached and rebuilt only when its recipe changes.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import docker.errors

from clusters.config_names import config_names
from clusters.errors import ClusterError
from clusters.image import ensure_image
from clusters.java_build import JavaBuildError, ensure_built
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION, NEWEST_KAFKA_4, check_kafka_version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka-version", action="append",
                        help=f"repeat for several (default: {DEFAULT_KAFKA_VERSION} and {NEWEST_KAFKA_4})")
    parser.add_argument("--also", action="append", default=[], metavar="V",
                        help="a release to prepare besides those (the nightly's KAFKA_VERSIONS)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    versions = list(dict.fromkeys([*(args.kafka_version or [DEFAULT_KAFKA_VERSION, NEWEST_KAFKA_4]), *args.also]))
    try:
        for version in versions:
            check_kafka_version(version)
            began = time.monotonic()
            print(ensure_image(version))
            imaged = time.monotonic()
            config_names(version)  # scenario validation reads them offline
            print(ensure_built(version))  # built against this version's kafka-clients (workload.client: java)
            print(f"Kafka {version}: node image {imaged - began:.1f} s, setting names and Java program "
                  f"{time.monotonic() - imaged:.1f} s (0 when cached)")
    except (ClusterError, JavaBuildError, docker.errors.DockerException) as e:
        print(f"kchaos: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
