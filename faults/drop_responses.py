"""drop-responses: requests of chosen Kafka APIs from chosen clients to the target brokers reach the broker and
take effect; the broker's answers to them never reach the client.

The request path sends a matched request on at once and drops the answer with its correlation id. From then
on that connection is silent both ways, as a connection whose network died after the request went out: the
client's later requests on it are not delivered and nothing comes back, so the client times the request out
(and, as both clients do, closes the connection and tries again on a new one). Forwarding the later answers
would show the client a gap in its correlation ids, which the Java client treats as a protocol error and
disconnects at once: not the time-out of a lost answer. Healing stops the rules, waits for the broker's
answers to the requests whose answers were dropped, and closes the connections still silenced. This is the
canonical unknown outcome: a write Kafka acknowledged whose client saw a time-out.

Evidence: one ``request`` line (action ``response-dropped``, cause matched) per dropped answer, with what the
broker answered (``response_error``); the requests a silenced connection swallowed afterwards are lines with
cause behind and outcome discarded (they never reached the broker).

Options: ``apis`` (Kafka's names, comma-separated; default Produce), ``roles`` (producer, consumer,
pipeline, comma-separated; all: every client), ``connections`` (all, the default: every connection,
a client's retry on a new one too; existing: only those open when the fault starts), ``limit`` (at most this
many answers dropped per broker; null: no limit). A Produce with acks=0 has no answer and is not matched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from faults.delay_requests import RequestFault


class DropResponsesFault(RequestFault):
    kind = "drop-responses"
    action = "drop-response"
    timed = False
    options: ClassVar[Mapping[str, Any]] = {"apis": "Produce", "roles": "producer", "connections": "all",
                                            "limit": None}

    def _describe(self, apis: str, who: str, nodes: str, scope: str) -> str:
        return f"drop the answers to {apis} from {who} to {nodes} on {scope}"
