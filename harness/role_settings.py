"""What the settings of every client role share: the client and release it runs, its Kafka settings and how they
reach its processes. Each role's own settings, refusals and processes are its part's (harness/producers_role.py,
consumers_role.py, pipeline_role.py, share_role.py); the scenario (harness/scenario.py) resolves them through
:meth:`WorkloadModel.role` and its checks that hold for every role loop over :class:`RoleView`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Protocol, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from harness.group_protocol import SETTING as GROUP_PROTOCOL_SETTING
from workloads.client import Library
from workloads.confluent_release import is_release

Scalar = Union[bool, int, float, str]
Client = Library
ROLE_CLIENT = Field(None, description="librdkafka or java; null: workload.client")
LIBRARY_CONFIG = Field({}, description="settings only a librdkafka client gets (e.g. queue.buffering.max.messages), "
                       "added to config")
JAVA_CONFIG = Field({}, description="settings only a Java client gets (e.g. buffer.memory), added to config")
GROUP_PROTOCOL = Field(None, description="group.protocol of this role's clients: classic, or consumer (KIP-848: "
                       "KRaft and Kafka 4.0 or later, librdkafka 2.12 or kafka-clients 4.0 or later; the session "
                       "timeout and heartbeat are then the brokers' group.consumer.* settings); null: the client's "
                       "default (classic)")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def written_as_release(value: Any) -> Any:
    """A client_version is a release's number, confluent-kafka's or kafka-clients' (whether PyPI or Maven Central
    has it is found out before the cluster starts); YAML reads an unquoted 2.5 as a number, refused as written."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str) and not is_release(value):
        raise ValueError(f"{value!r} is not a client release (e.g. 2.5.0 for confluent-kafka, 3.7.2 for "
                         "kafka-clients)")
    return value


Release = Annotated[str, BeforeValidator(written_as_release)]
CLIENT_VERSION = Field(None, description="the release the roles on workload.client run. librdkafka: a "
                       "confluent-kafka release from PyPI (e.g. 2.5.0, with the librdkafka its wheel bundles), in an "
                       "environment of its own under .cache/clients; null: the locked release of .venv. java: a "
                       "kafka-clients release from Maven Central, 3.5.0 or later (the Java program is built against "
                       "it under .cache/java-workload); null: kafka-clients of cluster.kafka_version. Built before "
                       "the cluster starts. The harness's own clients (admin, observer) and the final read-back stay "
                       "on the locked release and the cluster's kafka-clients")
ROLE_CLIENT_VERSION = Field(None, description="this role's client release, as workload.client_version; null: "
                            "workload.client_version if the role runs workload.client, else the locked release")


@dataclass(frozen=True)
class RoleView:
    """One role as the scenario resolves it: what the checks that hold for every role, and its part, need."""

    key: str          # its key under workload: producers, consumers, pipeline, share_consumers
    settings: Any     # its typed settings (the role's model)
    client: Client
    release: str | None   # its pinned release (None: .venv's confluent-kafka, or the cluster's kafka-clients)
    runs: bool        # it starts processes (a consumer group of 0 does not)

    @property
    def where(self) -> str:
        return f"workload.{self.key}"

    @property
    def config(self) -> dict[str, Scalar]:
        """What each of the role's processes is given: config, then its client's own map, then a consumer role's
        group_protocol as group.protocol."""
        return client_config(self.settings, self.client)


def client_config(settings: Any, client: Client) -> dict[str, Scalar]:
    """config, then the client's own map, then group_protocol as group.protocol where the role has one."""
    return {**settings.config, **own_map(settings, client), **group_protocol(settings)}


def own_map(settings: Any, client: Client) -> dict[str, Scalar]:
    """The settings only ``client`` gets (librdkafka_config or java_config)."""
    return dict(getattr(settings, "java_config" if client == "java" else "librdkafka_config", {}))


def group_protocol(settings: Any) -> dict[str, Scalar]:
    """``{group.protocol: ...}`` when the role names one, else nothing (the client's default)."""
    protocol = getattr(settings, "group_protocol", None)
    return {} if protocol is None else {GROUP_PROTOCOL_SETTING: protocol}


@dataclass(frozen=True)
class BrokerFacts:
    """What the parts read of the brokers they run against."""

    metadata: str
    kafka_version: str
    features: dict[str, int]
    broker_config: dict[str, Any]


class Workload(Protocol):
    """harness/scenario.py's ``WorkloadModel`` as the roles' checks and parts read it (it holds their settings, so
    they cannot import it)."""

    @property
    def client(self) -> Client: ...
    @property
    def transactions(self) -> Any: ...
    @property
    def producers(self) -> Any: ...
    @property
    def consumers(self) -> Any: ...
    @property
    def pipeline(self) -> Any: ...
    @property
    def share_consumers(self) -> Any: ...
    @property
    def transactional(self) -> bool: ...

    def role(self, key: str) -> RoleView: ...
