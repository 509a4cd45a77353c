#!/bin/sh
# Entry point of every kchaos node container: one image, three roles.
# The harness writes the node's config into /etc/kchaos (bind-mounted);
# @NODE_IP@ in it becomes this container's address on the cluster network,
# looked up at each start because a restarted container may get a new one.
set -eu
role="$1"
ip="$(hostname -i | awk '{print $1}')"
mkdir -p /run/kchaos
for f in /etc/kchaos/*; do
  sed "s/@NODE_IP@/$ip/g" "$f" > "/run/kchaos/$(basename "$f")"
done
JAVA_OPTS="${KCHAOS_HEAP:--Xms256m -Xmx512m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:TieredStopAtLevel=1 -Xshare:auto -Djava.awt.headless=true -Dlog4j.configuration=file:/run/kchaos/log4j.properties"
CP="/opt/kafka/libs/*"
case "$role" in
  zookeeper)
    exec java $JAVA_OPTS -Dzookeeper.4lw.commands.whitelist=* -cp "$CP" org.apache.zookeeper.server.quorum.QuorumPeerMain /run/kchaos/zoo.cfg ;;
  broker|controller)
    exec java $JAVA_OPTS -cp "$CP" kafka.Kafka /run/kchaos/server.properties ;;
  *)
    echo "run-node: unknown role '$role' (zookeeper, broker or controller)" >&2; exit 2 ;;
esac
