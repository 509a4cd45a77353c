"""The commands that start clusters: ``kchaos run`` and ``kchaos cluster``.

Kept apart from the command line so that only they load Docker, librdkafka
and Testcontainers; a Docker engine that does not answer is one line, like
every other error a user can act on.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker.errors

from catalogue.exits import EXIT_VALID, HarnessError
from clusters.spec import ClusterSpec
from harness import cluster_cmd
from harness.run import run_scenario
from harness.scenario import load_scenario
from rundir.phases import PhaseTimer
from spark_analysis.session import remote_url
from spark_analysis.warm import WarmSession
from verdicts.verdict import judge

@contextmanager
def docker_errors_in_one_line() -> Iterator[None]:
    """A Docker engine error in any command that starts clusters becomes a one-line HarnessError saying how to
    start one (what the command recorded before stays)."""
    try:
        yield
    except docker.errors.DockerException as e:
        raise HarnessError(f"Docker engine error ({e}); is dockerd running? `make setup` starts it") from None


def validate(scenario_file: Path, overrides: list[str]) -> int:
    """``kchaos validate``: the scenario loaded as ``kchaos run`` loads it (its schema, the setting names of its
    Kafka release and clients, its faults' targets, options and nesting, its client releases' numbers), and
    nothing started; what it would run, in one line. A problem is kchaos's one-line error, exit 2."""
    scenario = load_scenario(scenario_file, overrides)
    w = scenario.workload
    print(f"{scenario_file}: valid: {scenario.name}, Kafka {scenario.cluster.kafka_version} "
          f"({scenario.cluster.metadata}), {w.client} client, {len(scenario.faults)} fault"
          f"{'' if len(scenario.faults) == 1 else 's'}, {w.duration_s:g} s")
    return EXIT_VALID


def run(scenario_file: Path, overrides: list[str], seed: int | None, out: Path, engine: str,
        spark_master: str | None) -> int:
    """Run a scenario, then judge it; a harness error during the run wins over the verdict (exit 2).
    Its last line says how long each phase took (rundir/phases.py)."""
    scenario = load_scenario(scenario_file, overrides, seed)
    timer = PhaseTimer()
    # started while the run settles; a Spark Connect server (`kchaos spark up`, --spark-remote) is warm already
    warm = WarmSession(spark_master) if engine == "spark" and remote_url(spark_master) is None else None
    try:
        outcome = run_scenario(scenario, out, timer, on_settled=None if warm is None else warm.start)
        print(f"run directory: {outcome.run_dir}")
        try:
            spark = None
            if warm is not None:
                with timer.phase("waiting for the warm-up"):  # the checker's, begun while the run settled
                    spark = warm.session()
            code = judge(outcome.run_dir, engine, spark_master, timer, spark)
        finally:
            print(timer.line(), flush=True)
    finally:
        if warm is not None:
            warm.session()
            warm.stop()
    if outcome.harness_error:
        raise HarnessError(outcome.harness_error)
    return code


def cluster(action: str, args: argparse.Namespace) -> int:
    """``kchaos cluster up|status|down``."""
    if action == "up":
        return cluster_cmd.up(ClusterSpec(kafka_version=args.kafka_version, metadata=args.metadata,
                                          brokers=args.brokers, zookeepers=args.zookeepers,
                                          controllers=args.controllers), args.json)
    if action == "status":
        return cluster_cmd.status(args.cluster_id)
    return cluster_cmd.down(args.cluster_id)
