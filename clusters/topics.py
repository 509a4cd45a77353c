"""Topic administration with confluent-kafka's AdminClient."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_fixed

from clusters.cluster import Cluster
from clusters.errors import ClusterError
from clusters.spec import TopicSpec


def create_topic(cluster: Cluster, topic: TopicSpec, timeout: float = 60) -> None:
    """Create ``topic`` and wait until every partition has a leader and a full ISR.

    Impossible requests (RF above the number of brokers, min.insync.replicas
    above RF) are refused with a one-line :class:`ClusterError` before any
    request is sent.
    """
    topic.validate(len(cluster.brokers))
    new = NewTopic(topic.name, num_partitions=topic.partitions,
                   replication_factor=topic.replication_factor, config=topic.topic_config())
    request_topic(cluster, new, timeout)

    @retry(stop=stop_after_delay(timeout), wait=wait_fixed(0.5), reraise=True,
           retry=retry_if_exception_type((_NotSettled, ClusterError)))
    def settled() -> None:
        states = cluster.partitions(topic.name)
        if len(states) != topic.partitions or any(
                s.leader is None or len(s.isr) < topic.replication_factor for s in states):
            raise _NotSettled(topic.name)

    try:
        settled()
    except _NotSettled:
        raise ClusterError(f"topic {topic.name!r} has partitions without a leader or full ISR "
                           f"after {timeout:.0f}s") from None


def request_topic(cluster: Cluster, new: NewTopic, timeout: float = 60) -> None:
    """Send CreateTopics until it succeeds; a controller that just moved is asked again.

    After a fault the AdminClient may still address the old controller
    (NOT_CONTROLLER) or a broker that does not answer; a retry after a
    moment reaches the new one. A topic that exists already (an earlier
    attempt got through) counts as created.
    """
    deadline = time.monotonic() + timeout
    while True:
        future = cluster.admin().create_topics([new], request_timeout=min(15, timeout))[new.topic]
        try:
            future.result(timeout=min(15, timeout) + 1)
            return
        except KafkaException as e:
            error = e.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            retriable = error.retriable() or error.code() in (KafkaError.NOT_CONTROLLER, KafkaError.UNKNOWN)
            if not retriable or time.monotonic() > deadline:
                raise ClusterError(f"cannot create topic {new.topic!r}: {error.str()}") from None
            if error.code() == KafkaError.NOT_CONTROLLER:
                cluster.forget_admin()
        except TimeoutError:
            if time.monotonic() > deadline:
                raise ClusterError(f"cannot create topic {new.topic!r}: no answer within {timeout:.0f}s") from None
        time.sleep(1)


class _NotSettled(Exception):
    pass
