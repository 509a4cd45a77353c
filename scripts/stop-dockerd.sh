#!/usr/bin/env bash
# Stop the dockerd that scripts/setup.sh started, and nothing else.
pidfile=/run/kchaos-dockerd.pid
[ -f "$pidfile" ] || exit 0
pid=$(cat "$pidfile")
if [ -n "$pid" ] && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = dockerd ]; then
  kill "$pid"
  for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
fi
rm -f "$pidfile"
