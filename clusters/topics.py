"""Topic administration with confluent-kafka's AdminClient."""

from __future__ import annotations

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


# librdkafka's own errors for "nobody answered": the request may or may not have reached a broker
NO_ANSWER = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})
# after these a new AdminClient looks for the controller again
LOOK_AGAIN = NO_ANSWER | {KafkaError.NOT_CONTROLLER}
ASK_AGAIN = LOOK_AGAIN | {KafkaError.REQUEST_TIMED_OUT, KafkaError.UNKNOWN, KafkaError.INVALID_REPLICATION_FACTOR}


def ask_again(error: KafkaError) -> bool:
    """Whether a later CreateTopics may succeed where this one failed.

    confluent-kafka does not flag librdkafka's local time-out as retriable, yet
    after a fault it is the usual answer: the controller just moved, or a
    connection the fault cut still waits for replies that will never come.
    INVALID_REPLICATION_FACTOR is asked again too: the request was checked
    against the cluster's size before it was sent, so the controller's
    refusal means that it does not count every broker as alive yet.
    """
    return error.retriable() or error.code() in ASK_AGAIN


def request_topic(cluster: Cluster, new: NewTopic, timeout: float = 60) -> None:
    """Send CreateTopics until it succeeds; a controller that moved or did not answer is asked again.

    After a fault the AdminClient may still address the old controller
    (NOT_CONTROLLER) or wait on a connection that no longer answers; the
    next attempt goes through a new AdminClient that learns the cluster
    afresh. A topic that exists already (an earlier attempt got through)
    counts as created.
    """
    request_s = min(15, timeout)

    @retry(stop=stop_after_delay(timeout), wait=wait_fixed(1), reraise=True,
           retry=retry_if_exception_type(_AskAgain))
    def attempt() -> None:
        future = cluster.admin().create_topics([new], request_timeout=request_s)[new.topic]
        try:
            future.result(timeout=request_s + 1)
        except TimeoutError:  # the future is still pending: its AdminClient must outlive it (Cluster.admin)
            raise _AskAgain(f"no answer within {request_s:.0f}s") from None
        except KafkaException as e:
            error = e.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if not ask_again(error):
                raise ClusterError(f"cannot create topic {new.topic!r}: {error.str()}") from None
            if error.code() in LOOK_AGAIN:
                cluster.forget_admin()
            raise _AskAgain(error.str()) from None

    try:
        attempt()
    except _AskAgain as e:
        raise ClusterError(f"cannot create topic {new.topic!r} within {timeout:.0f}s: {e}") from None


class _AskAgain(Exception):
    pass


class _NotSettled(Exception):
    pass
