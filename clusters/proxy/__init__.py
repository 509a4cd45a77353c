"""The request path: a Kafka-protocol-aware proxy between the workload's clients and each broker.

Run as its own process (``python -m clusters.proxy``) only in scenarios with request-level faults;
the harness speaks to it through :class:`clusters.request_path.RequestPath`, never to this package.
"""
