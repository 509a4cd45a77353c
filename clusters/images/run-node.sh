#!/bin/sh
# Entry point of every kchaos node container: one image, three roles.
# The harness writes the node's config into /etc/kchaos (bind-mounted);
# @NODE_IP@ in it becomes this container's address on the cluster network,
# looked up at each start because a restarted container may get a new one.
# In KRaft mode (KCHAOS_KRAFT_CLUSTER_ID set) the node's storage is formatted
# first; --ignore-formatted makes that a no-op on every restart after a kill
# or a power cut. A broker's /data is its own ext4 volume, which the
# power-loss fault copies: syncfs makes the formatted storage durable at once,
# as on a machine provisioned long before (else a power cut within the first
# 30 s would take meta.properties or bootstrap.checkpoint with it).
# Both logging configs are passed: Kafka 3.x reads log4j 1's, 4.x log4j2's.
# While /etc/kchaos/hold exists the node waits before anything else: the
# harness is putting a fault's network rules (a cut, a slow link) into this
# new network namespace, and the service must not talk before they hold.
# Every JVM maps the image's class-data-sharing archive (archive-classes.sh);
# -Xshare:auto starts it without the archive if the archive cannot be used.
set -eu
role="$1"
held=0
while [ -e /etc/kchaos/hold ]; do
  if [ "$held" -ge 1200 ]; then
    echo "run-node: held for 120 s and never released: not starting without its network rules" >&2; exit 3
  fi
  sleep 0.1; held=$((held + 1))
done
ip="$(hostname -i | awk '{print $1}')"
mkdir -p /run/kchaos
for f in /etc/kchaos/*; do
  sed "s/@NODE_IP@/$ip/g" "$f" > "/run/kchaos/$(basename "$f")"
done
LOG_OPTS="-Dlog4j.configuration=file:/run/kchaos/log4j.properties -Dlog4j2.configurationFile=file:/run/kchaos/log4j2.properties"
SHARE="-Xshare:auto -XX:SharedArchiveFile=/opt/kafka/classes.jsa"
JAVA_OPTS="${KCHAOS_HEAP:--Xms256m -Xmx512m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:TieredStopAtLevel=1 $SHARE -Djava.awt.headless=true $LOG_OPTS"
CP="/opt/kafka/libs/*"
format_storage() {
  java -Xmx256m -XX:TieredStopAtLevel=1 $SHARE $LOG_OPTS -cp "$CP" kafka.tools.StorageTool format \
    --cluster-id "$KCHAOS_KRAFT_CLUSTER_ID" --config /run/kchaos/server.properties --ignore-formatted
}
case "$role" in
  zookeeper)
    exec java $JAVA_OPTS -Dzookeeper.4lw.commands.whitelist=* -cp "$CP" org.apache.zookeeper.server.quorum.QuorumPeerMain /run/kchaos/zoo.cfg ;;
  broker|controller)
    if [ -n "${KCHAOS_KRAFT_CLUSTER_ID:-}" ]; then
      format_storage
      if [ "$role" = broker ]; then sync -f /data; fi
    fi
    exec java $JAVA_OPTS -cp "$CP" kafka.Kafka /run/kchaos/server.properties ;;
  *)
    echo "run-node: unknown role '$role' (zookeeper, broker or controller)" >&2; exit 2 ;;
esac
