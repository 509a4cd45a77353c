package io.kchaos.workload;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A member of a share group (KIP-932), the Java twin of workloads/share_consumer.py: it polls, says each record
 * it was given ({@code V}, with the broker's delivery count), processes the batch ({@code processing_ms}), then
 * acknowledges every record explicitly with a seeded choice of ACCEPT, RELEASE or REJECT, commits the
 * acknowledgements synchronously and says what the client reported for each ({@code Q}). Compiled only against
 * kafka-clients that have KafkaShareConsumer (clusters/java_build.py); Main finds it by name.
 */
public final class ShareConsumer {
    static final Duration POLL = Duration.ofMillis(500);
    static final Duration COMMIT = Duration.ofSeconds(30);
    static final Duration CLOSE = Duration.ofSeconds(20);

    private ShareConsumer() {
    }

    public static void run(Spec spec, Child child) throws InterruptedException {
        Map<String, Object> props = new LinkedHashMap<>(spec.config());
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.str("bootstrap_servers"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, spec.str("group"));
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "kchaos-" + spec.name());
        props.put("share.acknowledgement.mode", "explicit");
        long seed = spec.integer("seed");
        double release = spec.number("release");
        double reject = spec.number("reject");
        double processingMs = spec.number("processing_ms");
        String topic = spec.str("topic");
        KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props, new ByteArrayDeserializer(),
                new ByteArrayDeserializer());
        try {
            consumer.subscribe(List.of(topic));
            Map<String, String> said = new LinkedHashMap<>();
            props.forEach((k, v) -> said.put(k, String.valueOf(v)));
            said.remove(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG);
            child.hello(said);
            child.pollUntilStopped(() -> consumer.poll(POLL), POLL.toNanos() / 5, records -> {
                if (!records.isEmpty()) {
                    process(consumer, records, seed, release, reject, processingMs, child);
                }
            });
        } finally {
            consumer.close(CLOSE);
        }
    }

    private static void process(KafkaShareConsumer<byte[], byte[]> consumer, ConsumerRecords<byte[], byte[]> records,
                                long seed, double release, double reject, double processingMs, Child child)
            throws InterruptedException {
        long now = child.nowNs();
        List<ConsumerRecord<byte[], byte[]>> batch = new ArrayList<>(records.count());
        List<String> lines = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r : records) {
            batch.add(r);
            Messages.Origin origin = Messages.decode(r.value());
            lines.add(Lines.delivered(r.partition(), r.offset(), origin.producer(), origin.seq(), delivery(r), now));
        }
        child.out.send(lines);
        if (processingMs > 0) {   // the application at work, holding the records it acquired
            Thread.sleep(Math.round(processingMs));
        }
        Map<ConsumerRecord<byte[], byte[]>, String> acks = new LinkedHashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : batch) {
            String ack = choose(seed, r.partition(), r.offset(), delivery(r), release, reject);
            consumer.acknowledge(r, AcknowledgeType.valueOf(ack.toUpperCase(java.util.Locale.ROOT)));
            acks.put(r, ack);
        }
        Map<Integer, Optional<KafkaException>> results = new HashMap<>();
        String failure = null;
        try {
            for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : consumer.commitSync(COMMIT).entrySet()) {
                results.put(e.getKey().partition(), e.getValue());
            }
        } catch (KafkaException e) {
            if (Child.isFatal(e)) {
                throw e;
            }
            failure = e.getClass().getSimpleName();
        }
        long done = child.nowNs();
        lines = new ArrayList<>();
        for (Map.Entry<ConsumerRecord<byte[], byte[]>, String> e : acks.entrySet()) {
            ConsumerRecord<byte[], byte[]> r = e.getKey();
            Optional<KafkaException> result = results.get(r.partition());
            String status = failure != null ? "fail" : result == null ? "unknown" : result.isEmpty() ? "ok" : "fail";
            String error = failure != null ? failure
                    : result != null && result.isPresent() ? result.get().getClass().getSimpleName() : null;
            lines.add(Lines.acknowledged(r.partition(), r.offset(), delivery(r), e.getValue(), status, done, error));
        }
        child.out.send(lines);
    }

    static long delivery(ConsumerRecord<byte[], byte[]> r) {
        return r.deliveryCount().map(Short::longValue).orElse(0L);
    }

    /**
     * The acknowledgement of one delivery: release with probability {@code release}, reject with {@code reject},
     * else accept; a function of the run's seed and the delivery alone (share_consumer.py choose_ack, the same
     * splitmix64), so a run with the same seed makes the same choice whichever member is given the record.
     */
    static String choose(long seed, int partition, long offset, long delivery, double release, double reject) {
        long z = seed * 0x9E3779B97F4A7C15L + partition * 0xBF58476D1CE4E5B9L + offset * 0x94D049BB133111EBL + delivery;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        z = z ^ (z >>> 31);
        double u = (z >>> 11) * 0x1.0p-53;
        return u < release ? "release" : u < release + reject ? "reject" : "accept";
    }
}
