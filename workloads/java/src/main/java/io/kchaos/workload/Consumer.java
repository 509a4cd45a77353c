package io.kchaos.workload;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The Java twin of workloads/consumer.py ConsumeLoop: an application consumer of the group. It polls a batch,
 * processes it ({@code processing_ms}, spread over the batch in slices of at most {@link #SLICE_MS}, each
 * slice's records one write of {@code R} lines) and only then commits: {@code manual} is a commitSync of the
 * batch's offsets once processed (a failure is swallowed: the records come again), {@code auto} is the client's
 * timer (enable.auto.commit), which commits what poll() returned, processed or not. So a consumer killed
 * mid-batch re-reads the processed part under manual commit and skips the rest under auto commit.
 * A stop lets the current batch finish.
 */
public final class Consumer {
    static final int SLICE_MS = 100;                              // processed records reach the harness this often
    static final Duration POLL = Duration.ofMillis(500);
    static final Duration CLOSE = Duration.ofSeconds(20);         // inside the harness's stop margin (30 s)

    private Consumer() {
    }

    /** The scenario's settings plus what the harness sets itself (consumer.py consumer_settings). */
    static Map<String, Object> settings(Spec spec, Map<String, Object> config, String commit, String isolation) {
        Map<String, Object> props = new LinkedHashMap<>();
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.putAll(config);
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.str("bootstrap_servers"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, spec.str("group"));
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "kchaos-" + spec.name());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, Boolean.toString("auto".equals(commit)));
        if (isolation != null) {   // none: the client's own default (read_uncommitted)
            props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        }
        return props;
    }

    static KafkaConsumer<byte[], byte[]> open(Map<String, Object> props) {
        return new KafkaConsumer<>(CheckConfig.withSerdes("consumer", props));
    }

    public static void run(Spec spec, Child child) throws InterruptedException {
        String commit = spec.str("commit");
        if (!"auto".equals(commit) && !"manual".equals(commit)) {
            throw new Spec.BadInput("commit must be auto or manual, not " + commit);
        }
        boolean manual = "manual".equals(commit);
        double processingMs = spec.number("processing_ms");
        JsonNode isolation = spec.optional("isolation");
        Map<String, Object> props = settings(spec, spec.config(), commit,
                isolation == null ? null : isolation.asText());
        KafkaConsumer<byte[], byte[]> consumer = open(props);
        try {
            consumer.subscribe(List.of(spec.str("topic")), new Assignments(child, partitions -> { }));
            child.hello("consumer", props);
            child.pollUntilStopped(() -> consumer.poll(POLL), POLL.toNanos() / 5, records -> {
                if (!records.isEmpty()) {
                    process(consumer, records, manual, processingMs, child);
                }
            });
        } finally {
            consumer.close(CLOSE);   // leaves the group now; under auto commit it commits what was polled
        }
    }

    /** The batch cut into consecutive slices, one per SLICE_MS of processing (one slice when it takes none). */
    static <T> List<List<T>> slices(List<T> batch, double processingMs) {
        int n = (int) Math.max(1, Math.min(batch.size(), Math.ceil(processingMs / SLICE_MS)));
        int size = (batch.size() + n - 1) / n;
        List<List<T>> parts = new ArrayList<>();
        for (int i = 0; i < batch.size(); i += size) {
            parts.add(batch.subList(i, Math.min(batch.size(), i + size)));
        }
        return parts;
    }

    private static void process(KafkaConsumer<byte[], byte[]> consumer, ConsumerRecords<byte[], byte[]> records,
                                boolean manual, double processingMs, Child child) throws InterruptedException {
        List<ConsumerRecord<byte[], byte[]>> batch = new ArrayList<>(records.count());
        records.forEach(batch::add);
        List<String> lines = new ArrayList<>();
        lines.add(Lines.polled(batch.size(), child.nowNs()));
        List<List<ConsumerRecord<byte[], byte[]>>> parts = slices(batch, processingMs);
        if (processingMs > 0) {   // say so now: the harness knows a batch is being processed
            child.out.send(lines);
            lines = new ArrayList<>();
        }
        for (int i = 0; i < parts.size(); i++) {
            if (processingMs > 0) {   // the application at work (a stop lets it finish: not child.sleep)
                Thread.sleep(Math.round(processingMs / parts.size()));
            }
            long now = child.nowNs();
            for (ConsumerRecord<byte[], byte[]> r : parts.get(i)) {
                lines.add(processed(r, now));
            }
            if (i == parts.size() - 1 && !manual) {
                lines.add(Lines.BATCH_DONE);
            }
            child.out.send(lines);
            lines = new ArrayList<>();
        }
        if (manual) {
            commit(consumer, batch);
            child.out.send(Lines.BATCH_DONE);
        }
    }

    /** Commit what was processed: past the last record of each partition in the batch. */
    private static void commit(KafkaConsumer<byte[], byte[]> consumer, List<ConsumerRecord<byte[], byte[]>> batch) {
        Map<TopicPartition, OffsetAndMetadata> upto = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : batch) {
            upto.merge(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1),
                    (a, b) -> a.offset() >= b.offset() ? a : b);
        }
        try {
            consumer.commitSync(upto);
        } catch (KafkaException e) {
            // a rebalance or a broker fault: these records will be redelivered (as consumer.py)
        }
    }

    /** {@code R} for a record: its partition, offset, and the producer and seq its value names. */
    static String processed(ConsumerRecord<byte[], byte[]> r, long timeNs) {
        Messages.Origin origin = Messages.decode(r.value());
        return Lines.processed(r.partition(), r.offset(), origin.producer(), origin.seq(), timeNs);
    }
}
