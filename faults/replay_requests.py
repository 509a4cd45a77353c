"""replay-requests: a request of a chosen Kafka API from chosen clients to the target brokers goes on as usual,
and a copy of it reaches the broker again later, on a new connection: a stale retry.

The request path forwards the matched request at once and keeps its bytes; after ``hold_s`` (or a time drawn
from [hold_s, hold_max_s]) it opens a new connection to the same broker, sends the copy, records the broker's
answer and closes it (the answer goes to nobody). What Kafka makes of the copy is the point: a Produce
without idempotence is written twice; an idempotent one is recognised by its producer id and sequence and
answered without a second write; an EndTxn of a finished transaction is refused or taken, by version.
Healing stops the rules and waits until every copy went and was answered.

Evidence: one ``request`` line (action ``replayed``) per copy: held_ns when it was copied, released_ns when
the copy was sent, response_error what the broker answered it, detail.replay_connection the new connection.

Options: :class:`faults.delay_requests.TimedRequestOptions`, with the defaults below (limit 1: one copy per
broker).
"""

from __future__ import annotations

from faults.base import with_defaults
from faults.delay_requests import RequestFault, TimedRequestOptions


class ReplayRequestsFault(RequestFault):
    kind = "replay-requests"
    action = "replay"
    Options = with_defaults(TimedRequestOptions, "ReplayRequestsOptions", apis="Produce", hold_s=5.0,
                            connections="all", limit=1)
    settings: TimedRequestOptions

    def _describe(self, apis: str, who: str, nodes: str, scope: str) -> str:
        s = self.settings
        after = f"{s.hold_s} s" if s.hold_max_s is None else f"{s.hold_s}-{s.hold_max_s} s"
        limit = "each" if s.limit is None else f"up to {s.limit}"
        return f"replay {limit} {apis} from {who} to {nodes} {after} later on a new connection ({scope})"
