#!/bin/sh
# Build time (a RUN step of the node image): start every JVM a node runs once (StorageTool's format, a
# KRaft node with both roles, and in Kafka 3.x a ZooKeeper and a ZooKeeper-mode broker), each listing the
# classes it loads, then dump one class-data-sharing archive of them all. run-node.sh maps it
# (-XX:SharedArchiveFile), so a node's JVM finds Kafka's, Scala's and ZooKeeper's classes already parsed
# and verified: starting one costs about 40 % less CPU, which is what six nodes booting on two cores wait on.
# Every node is started on localhost only and stopped again; nothing but the archive is kept.
set -eu
CP="/opt/kafka/libs/*"
ARCHIVE="${1:-/opt/kafka/classes.jsa}"
work=/tmp/kchaos-archive
mkdir -p "$work"
cat > "$work/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%p %m (%c)%n
EOF
cat > "$work/log4j2.properties" <<'EOF'
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=%p %m (%c)%n
EOF
LOG_OPTS="-Dlog4j.configuration=file:$work/log4j.properties -Dlog4j2.configurationFile=file:$work/log4j2.properties"
runs=0

# list NAME CLASS ARGS...: run a JVM to its end, listing its classes into $work/NAME.classes
list() {
  name="$1"; shift; runs=$((runs + 1))
  java -Xmx256m -XX:DumpLoadedClassList="$work/$name.classes" $LOG_OPTS -cp "$CP" "$@" > "$work/$name.log" 2>&1
}

# start NAME MARKER CLASS ARGS...: start a server JVM and wait (60 s at most) for MARKER in its output;
# its pid is left in $pid
start() {
  name="$1"; marker="$2"; shift 2; runs=$((runs + 1))
  java -Xmx512m -XX:DumpLoadedClassList="$work/$name.classes" $LOG_OPTS -cp "$CP" "$@" > "$work/$name.log" 2>&1 &
  pid=$!
  waited=0
  until awk -v m="$marker" 'index($0, m) { found = 1 } END { exit !found }' "$work/$name.log"; do
    if [ "$waited" -ge 600 ] || ! kill -0 "$pid" 2>/dev/null; then
      echo "archive-classes: $name never logged '$marker'; its output:" >&2
      sed -n '1,200p' "$work/$name.log" >&2
      kill -9 "$pid" 2>/dev/null || true
      exit 1
    fi
    sleep 0.1; waited=$((waited + 1))
  done
}

# stop PID: a clean stop, so the JVM's class list is complete
stop() {
  kill -TERM "$1"
  wait "$1" || true
}

cat > "$work/kraft.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:19093
listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$work/kraft-data
offsets.topic.replication.factor=1
EOF
list format kafka.tools.StorageTool format --cluster-id MkU3OEVBNTcwNTJENDM2Qk --config "$work/kraft.properties"
start kraft "Kafka Server started" kafka.Kafka "$work/kraft.properties"
stop "$pid"

if ls /opt/kafka/libs | awk '/^zookeeper-3/ { found = 1 } END { exit !found }'; then  # Kafka 3.x
  mkdir -p "$work/zk-data"
  echo 1 > "$work/zk-data/myid"
  cat > "$work/zoo.cfg" <<EOF
dataDir=$work/zk-data
clientPortAddress=127.0.0.1
clientPort=12181
tickTime=2000
initLimit=10
syncLimit=5
standaloneEnabled=false
admin.enableServer=false
server.1=127.0.0.1:12888:13888
EOF
  cat > "$work/zk-broker.properties" <<EOF
broker.id=1
zookeeper.connect=127.0.0.1:12181
listeners=PLAINTEXT://127.0.0.1:19094
log.dirs=$work/zk-broker-data
offsets.topic.replication.factor=1
EOF
  start zookeeper "LEADING" org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg"
  zookeeper=$pid
  start zk-broker "started (kafka.server.KafkaServer)" kafka.Kafka "$work/zk-broker.properties"
  stop "$pid"
  stop "$zookeeper"
fi

# one list: each class once, without the per-list ids (they only matter for custom class loaders)
sed 's/ id: [0-9]*$//' "$work"/*.classes | awk '!seen[$0]++' > "$work/all.classes"
java -Xshare:dump -XX:SharedClassListFile="$work/all.classes" -XX:SharedArchiveFile="$ARCHIVE" -cp "$CP" \
  > "$work/dump.log" 2>&1 || { echo "archive-classes: dumping the archive failed:" >&2; cat "$work/dump.log" >&2; exit 1; }
echo "archive-classes: $(awk 'END { print NR }' "$work/all.classes") classes from $runs JVMs into $ARCHIVE"
rm -rf "$work"
