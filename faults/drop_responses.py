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

Options: :class:`faults.delay_requests.RequestOptions`, with the defaults below (connections all: a client's
retry on a new connection is silenced too). A Produce with acks=0 has no answer and is not matched.
"""

from __future__ import annotations

from faults.base import with_defaults
from faults.delay_requests import RequestFault, RequestOptions


class DropResponsesFault(RequestFault):
    kind = "drop-responses"
    action = "drop-response"
    Options = with_defaults(RequestOptions, "DropResponsesOptions", apis="Produce", connections="all")

    def _describe(self, apis: str, who: str, nodes: str, scope: str) -> str:
        return f"drop the answers to {apis} from {who} to {nodes} on {scope}"
