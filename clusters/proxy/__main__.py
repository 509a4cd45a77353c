"""The request path's process: ``python -m clusters.proxy --control SOCKET --brokers 1,2,3``.

It listens on one port per broker (on ``--listen``, 127.0.0.1 by default; with ``--inter-broker HOST``, a
second port per broker on HOST, for the brokers' own traffic), prints one JSON line
``{"ports": {"1": 40123, ...}, "inter_broker_ports": {...}}`` on stdout once it listens, and takes commands
on a Unix socket: one JSON object a line, one JSON answer a line (``{"ok": true, ...}`` or
``{"ok": false, "error": "..."}``).
Commands (clusters/request_path.py is their only caller):

- ``route`` broker, host, port, listener (clients, the default, or inter-broker): where new connections
  for the broker on that listener go
- ``hold`` rule, apis, broker, clients, hold_s, hold_max_s, connections, limit, fault, seed, action
  (delay, drop-response or replay)
- ``release`` rule, flush
- ``records`` since: the held requests recorded from index ``since`` on
- ``stats``; ``stop``

It exits when its stdin closes (the harness that started it died) or on ``stop``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from typing import Any

from clusters.proxy.core import CLIENTS, INTER_BROKER, Proxy


async def _control(proxy: Proxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   stop: asyncio.Event) -> None:
    try:
        while line := await reader.readline():
            try:
                answer = {"ok": True, **_command(proxy, json.loads(line), stop)}
            except (ValueError, KeyError, TypeError) as e:
                answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def _command(proxy: Proxy, cmd: dict[str, Any], stop: asyncio.Event) -> dict[str, Any]:
    op = cmd.pop("op")
    if op == "route":
        proxy.route(int(cmd["broker"]), str(cmd["host"]), int(cmd["port"]), str(cmd.get("listener", CLIENTS)))
        return {}
    if op == "hold":
        rule = proxy.hold(cmd.pop("rule"), **cmd)
        return {"rule": rule.rule_id, "existing": len(rule.existing)}
    if op == "release":
        return {"pending": proxy.release(cmd["rule"], bool(cmd.get("flush", False)))}
    if op == "records":
        since = int(cmd.get("since", 0))
        return {"records": [r.as_dict() for r in proxy.records[since:]], "next": len(proxy.records)}
    if op == "stats":
        return {"stats": proxy.stats()}
    if op == "stop":
        stop.set()
        return {}
    raise ValueError(f"unknown command {op!r}")


def _watch_stdin(stop: asyncio.Event) -> None:
    """Stop when stdin, a pipe from the harness, closes: the harness died or is done."""
    fd = sys.stdin.fileno()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(fd)
            stop.set()

    asyncio.get_running_loop().add_reader(fd, readable)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m clusters.proxy")
    parser.add_argument("--control", required=True, help="Unix socket to take commands on")
    parser.add_argument("--brokers", required=True, help="broker ids, comma-separated")
    parser.add_argument("--listen", default="127.0.0.1")
    parser.add_argument("--inter-broker", default=None, help="also listen for the brokers' own traffic on this host")
    args = parser.parse_args(argv)
    proxy = Proxy([int(b) for b in args.brokers.split(",")], args.listen, inter_broker_host=args.inter_broker)
    stop = asyncio.Event()
    ports = await proxy.start()
    if os.path.exists(args.control):
        os.unlink(args.control)
    control = await asyncio.start_unix_server(lambda r, w: _control(proxy, r, w, stop), args.control)
    inter_broker = proxy.listening.get(INTER_BROKER, {})
    print(json.dumps({"ports": {str(b): p for b, p in ports.items()},
                      "inter_broker_ports": {str(b): p for b, p in inter_broker.items()}}), flush=True)
    _watch_stdin(stop)
    await stop.wait()
    control.close()
    await proxy.close()
    with contextlib.suppress(OSError):
        os.unlink(args.control)


if __name__ == "__main__":
    asyncio.run(main())
