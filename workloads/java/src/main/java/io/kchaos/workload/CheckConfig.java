package io.kchaos.workload;

import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * A scenario's Java client settings judged by the Java client of the scenario's version, before any cluster
 * starts: names it does not define (it would only log a warning and ignore them), the ConfigException a bad value
 * gets, and the values it really runs with ({@code Main check-config <producer|consumer> <config json>} prints
 * {@code {"unknown": [...], "error": str|null, "effective": {...}}}). The effective values are also what a
 * workload process says in its {@code K} line.
 */
public final class CheckConfig {
    /** Durability settings a producer reports: what decides which acknowledged writes can be lost. */
    static final List<String> PRODUCER_SETTINGS = List.of(ProducerConfig.ACKS_CONFIG,
            ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, ProducerConfig.RETRIES_CONFIG,
            ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG,
            ProducerConfig.LINGER_MS_CONFIG, ProducerConfig.TRANSACTIONAL_ID_CONFIG);
    /** What decides which records a consumer sees and which it may skip. */
    static final List<String> CONSUMER_SETTINGS = List.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG,
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, ConsumerConfig.AUTO_OFFSET_RESET_CONFIG,
            ConsumerConfig.MAX_POLL_RECORDS_CONFIG);
    // a client is built to check what only its constructor checks (e.g. delivery.timeout.ms against linger.ms +
    // request.timeout.ms); it is closed at once and never asked to reach this address
    private static final String NO_BROKER = "127.0.0.1:9";
    private static final String PLACEHOLDER_GROUP = "kchaos-check-config";

    private CheckConfig() {
    }

    /** The resolved values of the durability settings of a client made with {@code props}, as strings. */
    public static Map<String, String> effective(String kind, Map<String, Object> props) {
        Map<String, String> out = new LinkedHashMap<>();
        if ("producer".equals(kind)) {
            ProducerConfig config = new ProducerConfig(withSerdes(kind, props));
            for (String name : PRODUCER_SETTINGS) {
                Object value = config.values().get(name);
                if (value != null) {
                    out.put(name, value.toString());
                }
            }
            out.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Long.toString(deliveryTimeoutMs(config)));
        } else if ("consumer".equals(kind)) {
            ConsumerConfig config = new ConsumerConfig(withSerdes(kind, props));
            for (String name : CONSUMER_SETTINGS) {
                Object value = config.values().get(name);
                if (value != null) {
                    out.put(name, value.toString());
                }
            }
        } else {
            throw new Spec.BadInput("kind must be producer or consumer, not " + kind);
        }
        return out;
    }

    /**
     * What KafkaProducer runs with: a delivery.timeout.ms below linger.ms + request.timeout.ms that the user
     * did not set is raised to that sum (one the user set is a ConfigException, see {@link #check}).
     */
    static long deliveryTimeoutMs(AbstractConfig config) {
        long delivery = ((Number) config.values().get(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG)).longValue();
        long lingerAndRequest = Math.min(((Number) config.values().get(ProducerConfig.LINGER_MS_CONFIG)).longValue()
                + ((Number) config.values().get(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG)).longValue(),
                Integer.MAX_VALUE);
        return Math.max(delivery, lingerAndRequest);
    }

    /** The byte-array (de)serializers every workload client uses, unless the settings name their own. */
    static Map<String, Object> withSerdes(String kind, Map<String, Object> props) {
        Map<String, Object> all = new LinkedHashMap<>(props);
        if ("producer".equals(kind)) {
            all.putIfAbsent(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            all.putIfAbsent(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        } else {
            all.putIfAbsent(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            all.putIfAbsent(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        }
        return all;
    }

    /** The check-config role: one JSON line on stdout. */
    static void run(String kind, String configJson) {
        Map<String, Object> config = Spec.settings(Spec.parse(configJson).root);
        Set<String> known = "producer".equals(kind) ? ProducerConfig.configNames()
                : "consumer".equals(kind) ? ConsumerConfig.configNames() : null;
        if (known == null) {
            throw new Spec.BadInput("check-config: kind must be producer or consumer, not " + kind);
        }
        List<String> unknown = new ArrayList<>(new TreeSet<>(config.keySet()));
        unknown.removeAll(known);
        ObjectNode result = Spec.JSON.createObjectNode();
        result.putPOJO("unknown", unknown);
        String error = null;
        Map<String, String> effective = Map.of();
        if (unknown.isEmpty()) {
            Map<String, Object> props = new LinkedHashMap<>(config);
            // what the harness sets itself: a broker address, and a group and offset reset for consumers
            props.putIfAbsent(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, NO_BROKER);
            props.putIfAbsent(ProducerConfig.CLIENT_ID_CONFIG, "kchaos-check-config");
            if ("consumer".equals(kind)) {
                props.putIfAbsent(ConsumerConfig.GROUP_ID_CONFIG, PLACEHOLDER_GROUP);
                props.putIfAbsent(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            }
            try {
                effective = effective(kind, props);
                construct(kind, props);
            } catch (ConfigException e) {
                error = e.getMessage();
                effective = Map.of();
            } catch (KafkaException e) {   // "Failed to construct kafka producer", caused by what was wrong
                error = rootMessage(e);
                effective = Map.of();
            }
        }
        result.put("error", error);
        result.putPOJO("effective", effective);
        System.out.println(result);
        System.out.flush();
    }

    /** Build and close the client: its constructor checks what the config classes do not. */
    private static void construct(String kind, Map<String, Object> props) {
        Map<String, Object> all = withSerdes(kind, props);
        if ("producer".equals(kind)) {
            new KafkaProducer<byte[], byte[]>(all).close(Duration.ZERO);
        } else {
            new KafkaConsumer<byte[], byte[]>(all).close();   // never joined: nothing to commit or leave
        }
    }

    private static String rootMessage(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null && t.getCause() != t) {
            t = t.getCause();
            if (t instanceof ConfigException) {
                return t.getMessage();
            }
        }
        return t.getMessage() == null ? t.getClass().getSimpleName() : t.getMessage();
    }
}
