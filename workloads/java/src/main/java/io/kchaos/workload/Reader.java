package io.kchaos.workload;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The final read-back with Kafka's Java client (the twin of workloads/consumer.py read_back): every partition
 * assigned from the beginning (no group, no commits) and read until its position reaches the high watermark the
 * harness measured ({@code high}), or until {@code timeout_s}.
 *
 * <p>Complete means the position got there, not the last record: transaction markers take offsets. Records at
 * or past high[p] are not reported (written after the harness looked). Lines: {@code R} per record, with the
 * input it was made from when the value is a pipeline's output; one {@code F <partition> <position>} per
 * partition; then Main's {@code E}.
 */
public final class Reader {
    static final Duration POLL = Duration.ofMillis(500);
    // a position the client does not know yet costs a ListOffsets request: never wait long on one leader
    static final Duration POSITION = Duration.ofMillis(200);

    private Reader() {
    }

    public static void run(Spec spec, Child child) {
        String topic = spec.str("topic");
        int partitions = (int) spec.integer("partitions");
        JsonNode highs = spec.node("high");
        long[] high = new long[partitions];
        long[] position = new long[partitions];
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            JsonNode h = highs.get(Integer.toString(p));
            if (h == null || !h.canConvertToLong()) {
                throw new Spec.BadInput("the spec's high has no offset for partition " + p);
            }
            high[p] = h.asLong();
            tps.add(new TopicPartition(topic, p));
        }
        long deadline = System.nanoTime() + (long) (spec.number("timeout_s") * 1e9);
        Map<String, Object> props = new LinkedHashMap<>();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.str("bootstrap_servers"));
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "kchaos-" + spec.name());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, spec.str("isolation"));
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");   // fewer, larger polls: it may read millions
        KafkaConsumer<byte[], byte[]> consumer = Consumer.open(props);
        try {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            child.hello("consumer", props);
            while (behind(position, high) && System.nanoTime() < deadline && !child.stopping()) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(POLL);
                if (!records.isEmpty()) {
                    long now = child.nowNs();
                    List<String> lines = new ArrayList<>(records.count());
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        if (r.offset() < high[r.partition()]) {
                            lines.add(line(r, now));
                        }
                    }
                    child.out.send(lines);
                }
                for (int p = 0; p < partitions; p++) {
                    if (position[p] < high[p]) {
                        try {
                            position[p] = Math.max(position[p], consumer.position(tps.get(p), POSITION));
                        } catch (TimeoutException e) {
                            // its leader is away: asked again after the next poll
                        }
                    }
                }
            }
            List<String> lines = new ArrayList<>(partitions);
            for (int p = 0; p < partitions; p++) {
                lines.add("F " + p + " " + position[p]);
            }
            child.out.send(lines);
        } finally {
            consumer.close(Duration.ZERO);   // no group to leave, nothing to commit
        }
    }

    static boolean behind(long[] position, long[] high) {
        for (int p = 0; p < position.length; p++) {
            if (position[p] < high[p]) {
                return true;
            }
        }
        return false;
    }

    /** {@code R} with 6 fields, or 8 when the value is a pipeline's output: then it names its input too. */
    static String line(ConsumerRecord<byte[], byte[]> r, long timeNs) {
        String line = Consumer.processed(r, timeNs);
        byte[] value = r.value();
        if (value == null || value.length == 0 || value[value.length - 1] != ':') {   // padded: no source named
            return line;
        }
        Messages.Origin source = Messages.decodeSource(value);
        return source.producer() == null ? line : line + " " + source.producer() + " " + source.seq();
    }
}
