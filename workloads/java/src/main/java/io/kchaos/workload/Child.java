package io.kchaos.workload;

import com.fasterxml.jackson.core.JsonProcessingException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.UnsupportedVersionException;

import java.util.List;
import java.util.Map;

/**
 * What every role gets from Main: its spec, the line writer, the stop request and the run's clock.
 * See Main's comment for the API as a whole.
 */
public final class Child {
    public final Spec spec;
    public final Lines out;
    public final String name;
    private final long originNs;
    private final Object stopSignal = new Object();
    private volatile boolean stopping;

    Child(Spec spec, Lines out) {
        this.spec = spec;
        this.out = out;
        this.name = spec.name();
        this.originNs = spec.integer("origin_ns");
    }

    /** Nanoseconds since the run started: System.nanoTime and Python's monotonic_ns read one CLOCK_MONOTONIC. */
    public long nowNs() {
        return System.nanoTime() - originNs;
    }

    /** The harness said {@code stop}: finish (drain, commit the open transaction), then return from run(). */
    public boolean stopping() {
        return stopping;
    }

    /** What a role does with each poll's answer (it may sleep: the application at work). */
    @FunctionalInterface
    public interface Batch<R> {
        void handle(R records) throws InterruptedException;
    }

    /**
     * Poll and handle each answer until the harness says stop. A Kafka client error that is not fatal is said on
     * stderr and the poll tried again a moment ({@code backoffNanos}) later, as consumer.py drops librdkafka's
     * error events: a broker fault is what kchaos is for, and the application polls on (a record it could not
     * read is read again or never). A fatal one ends the role.
     */
    public <R> void pollUntilStopped(java.util.function.Supplier<R> poll, long backoffNanos, Batch<R> batch)
            throws InterruptedException {
        while (!stopping()) {
            R records;
            try {
                records = poll.get();
            } catch (org.apache.kafka.common.KafkaException e) {
                if (isFatal(e)) {
                    throw e;
                }
                System.err.println("poll: " + e);
                sleep(backoffNanos);
                continue;
            }
            batch.handle(records);
        }
    }

    /** Sleep up to {@code nanos}, waking early when asked to stop; returns {@link #stopping()}. */
    public boolean sleep(long nanos) {
        long deadline = System.nanoTime() + nanos;
        synchronized (stopSignal) {
            long left;
            while (!stopping && (left = deadline - System.nanoTime()) > 0) {
                try {
                    stopSignal.wait(left / 1_000_000, (int) (left % 1_000_000));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        }
        return stopping;
    }

    void stop() {
        synchronized (stopSignal) {
            stopping = true;
            stopSignal.notifyAll();
        }
    }

    /**
     * {@code H <pid>} then {@code K java <kafka-clients version> <effective settings>}, in one write: the client
     * is up. {@code kind} is "producer" or "consumer"; {@code props} the properties the client was made with.
     */
    public void hello(String kind, Map<String, Object> props) {
        hello(kind, props, Map.of());
    }

    /** {@link #hello(String, Map)} with settings of the application's own beside the client's (on_commit_error). */
    public void hello(String kind, Map<String, Object> props, Map<String, String> own) {
        Map<String, String> all = new java.util.LinkedHashMap<>(CheckConfig.effective(kind, props));
        all.putAll(own);
        hello(all);
    }

    /** {@link #hello(String, Map)} with the settings said as they are (a client CheckConfig does not know). */
    public void hello(Map<String, String> effective) {
        String settings;
        try {
            settings = Spec.JSON.writeValueAsString(effective);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
        out.send(List.of(Lines.hello(ProcessHandle.current().pid()),
                "K java " + clientsVersion() + " " + settings));
    }

    /**
     * Thrown by a role when its Kafka client cannot go on (fenced, a transaction that did not end within
     * commit_timeout_s, ...): Main prints the message and exits 4, and the harness starts a replacement.
     */
    public static final class Fatal extends RuntimeException {
        public Fatal(String message) {
            super(message);
        }

        public Fatal(String message, Throwable cause) {
            super(message, cause);
        }
    }

    /**
     * Whether an exception (or one it wraps) means this client instance is finished, as KafkaProducer's javadoc
     * says in 3.9 and 4.3: fenced (a newer instance took the transactional.id or group.instance.id), broker
     * lost the idempotent sequence, not authorized, or a request the broker does not support.
     */
    public static boolean isFatal(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof Fatal || t instanceof ProducerFencedException || t instanceof FencedInstanceIdException
                    || t instanceof OutOfOrderSequenceException || t instanceof AuthorizationException
                    || t instanceof UnsupportedVersionException) {
                return true;
            }
            if (t.getCause() == t) {
                break;
            }
        }
        return false;
    }

    /** kafka-clients' own release, from the file its jar carries (AppInfoParser, which reads it, moved in 4.4). */
    static String clientsVersion() {
        java.util.Properties props = new java.util.Properties();
        try (java.io.InputStream in = org.apache.kafka.clients.producer.KafkaProducer.class
                .getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) {
                props.load(in);
            }
        } catch (java.io.IOException e) {
            return "unknown";
        }
        return props.getProperty("version", "unknown");
    }
}
