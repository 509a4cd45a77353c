"""Topic administration with confluent-kafka's AdminClient."""

from __future__ import annotations

from confluent_kafka.admin import NewTopic
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_fixed

from clusters.cluster import Cluster, admin_result
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
    admin_result(cluster.admin().create_topics([new], request_timeout=timeout)[topic.name], timeout,
                 f"create topic {topic.name!r}")

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


class _NotSettled(Exception):
    pass
