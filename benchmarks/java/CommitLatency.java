import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/** How long a Java consumer's commitSync() takes (benchmarks/commit_latency.py): java -cp 'libs/*' CommitLatency.java BOOTSTRAP TOPIC COMMITS; prints one latency in ms per line. */
public class CommitLatency {
    public static void main(String[] args) {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", "gj-" + UUID.randomUUID());
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        List<Double> lat = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(args[1]));
            int commits = Integer.parseInt(args[2]);
            while (lat.size() < commits) {
                ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(500));
                if (rs.isEmpty()) continue;
                Map<TopicPartition, OffsetAndMetadata> upto = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : rs) {
                    upto.merge(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1),
                            (a, b) -> a.offset() >= b.offset() ? a : b);
                }
                long t0 = System.nanoTime();
                c.commitSync(upto);
                lat.add((System.nanoTime() - t0) / 1e6);
            }
        }
        for (double ms : lat) {
            System.out.printf("%.3f%n", ms);
        }
    }
}
