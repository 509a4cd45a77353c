package io.kchaos.workload;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.InvalidRecordException;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.RecordBatchTooLargeException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.errors.TransactionAbortedException;

import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The Java twin of workloads/producer.py ProduceLoop: writes sequence-numbered messages until stopped, at a
 * target rate or as fast as the client takes them. Each batch of seqs is announced ({@code I}) before any is
 * handed to send(), so a SIGKILL hides no send; each callback becomes an {@code S} line; seqs announced but not
 * handed over when a stop came are withdrawn ({@code X}).
 *
 * <p>{@code fail} only when the record was definitely not written: send() refused it before it entered the
 * client (it threw, or called back at once on this thread: no metadata within max.block.ms, no buffer memory,
 * too large), or the broker refused it as a whole (too large, invalid, not authorized), or an abort took it out of
 * the client before any broker saw it. Anything else may follow an attempt that reached the log: {@code unknown}.
 */
public class Producer {
    static final int BATCH = 1000;                 // seqs announced and sent per loop turn, at most
    static final long MAX_OUTSTANDING = 100_000;   // sends not yet called back, at most (librdkafka's queue size)

    final Child child;
    final Lines out;
    final String name;
    final String topic;
    final Double rate;
    final int messageBytes;
    final double flushTimeoutS;
    final Map<String, Object> props;
    final KafkaProducer<byte[], byte[]> producer;
    final boolean offsetsKnown;                    // acks=0: no broker answers, any offset is the client's guess
    final AtomicLong outstanding = new AtomicLong();
    Integer partitions;                            // set: seq's partition is seq % partitions (transactions)
    private final Thread sendingThread = Thread.currentThread();
    private long sendingSeq = -1;                  // the seq inside send() now (read on this thread only)

    Producer(Spec spec, Child child) {
        this.child = child;
        this.out = child.out;
        this.name = child.name;
        this.topic = spec.str("topic");
        this.rate = spec.optionalNumber("rate");
        this.messageBytes = (int) spec.integer("message_bytes");
        this.flushTimeoutS = spec.number("flush_timeout_s");
        this.props = settings(spec);
        this.producer = new KafkaProducer<>(CheckConfig.withSerdes("producer", props));
        this.offsetsKnown = !"0".equals(CheckConfig.effective("producer", props).get(ProducerConfig.ACKS_CONFIG));
    }

    /** The scenario's Java settings plus what the harness sets itself (as workloads/producer.py does). */
    static Map<String, Object> settings(Spec spec) {
        Map<String, Object> props = spec.config();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.str("bootstrap_servers"));
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "kchaos-" + spec.name());
        JsonNode txns = spec.optional("transactions");
        if (txns != null) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txns.get("transactional_id").asText());
            props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, txns.get("timeout_ms").asText());
        }
        return props;
    }

    public static void run(Spec spec, Child child) {
        new Producer(spec, child).produce();
    }

    void produce() {
        child.hello("producer", props);
        long seq = 0;
        long started = System.nanoTime();
        while (!child.stopping()) {
            long n = due(seq, started);
            if (n <= 0) {
                child.sleep(waitNs(seq, started));
            } else {
                seq = send(seq, n, true);
            }
        }
        drain();
    }

    /** How many seqs to send now: what the rate allows and the outstanding limit leaves. */
    long due(long seq, long started) {
        long room = Math.min(BATCH, MAX_OUTSTANDING - outstanding.get());
        if (rate == null) {
            return room;
        }
        return Math.min(room, (long) ((System.nanoTime() - started) / 1e9 * rate) + 1 - seq);
    }

    long waitNs(long seq, long started) {
        if (rate == null) {
            return 1_000_000;   // too many outstanding: a callback will make room
        }
        long next = started + (long) (seq / rate * 1e9);
        return Math.min(Math.max(next - System.nanoTime(), 0), 100_000_000);
    }

    /** Record of a seq: to seq % partitions when set, else where the default partitioner puts its key. */
    ProducerRecord<byte[], byte[]> record(long seq) {
        byte[] value = Messages.encode(name, seq, messageBytes);
        return partitions == null ? new ProducerRecord<>(topic, Messages.key(seq), value)
                : new ProducerRecord<>(topic, (int) (seq % partitions), Messages.key(seq), value);
    }

    /** What a send() threw that stopped a batch (null: none); the transactional producer ends on it. */
    Throwable refused;

    /**
     * Announce seqs first.. (before send(): a kill must not hide a send), send them; the next seq. A stop (when
     * {@code withdrawOnStop}) or a send() that throws withdraws the rest of the batch ({@code X}); after a throw
     * the next seq is the first withdrawn one, so the seqs stay contiguous.
     */
    long send(long first, long count, boolean withdrawOnStop) {
        out.send(Lines.invoked(first, count, child.nowNs()));
        long end = first + count;
        for (long seq = first; seq < end; seq++) {
            if (withdrawOnStop && child.stopping()) {
                out.add(Lines.withdrawn(seq, end - seq));
                return seq;
            }
            outstanding.incrementAndGet();
            sendingSeq = seq;
            try {
                producer.send(record(seq), new Sent(seq));
            } catch (KafkaException | IllegalStateException e) {   // refused before it entered the client
                outstanding.decrementAndGet();
                out.add(Lines.completed("fail", seq, null, null, child.nowNs(), errorName(e)));
                if (seq + 1 < end) {
                    out.add(Lines.withdrawn(seq + 1, end - seq - 1));
                }
                out.flush();
                refused = e;
                if (finishedBy(e)) {   // this producer instance is finished: the harness replaces it
                    throw Child.isFatal(e) ? e : new Child.Fatal("send refused: " + Main.describe(e), e);
                }
                return seq + 1;   // the withdrawn seqs are announced again: every seq gets one line
            } finally {
                sendingSeq = -1;
            }
        }
        return end;
    }

    /**
     * Whether a send() that threw means this producer cannot go on. A plain one throws a KafkaException only when
     * its idempotence state failed for good (failIfNotReadyForSend: every later send would throw too), so any
     * does; a transactional one aborts instead, unless the error is fatal.
     */
    boolean finishedBy(RuntimeException e) {
        return Child.isFatal(e) || (e instanceof KafkaException && !(e instanceof InterruptException));
    }

    /** Wait up to flush_timeout_s for outstanding callbacks; the harness calls the rest in flight ({@code unknown}). */
    void drain() {
        Thread flusher = new Thread(producer::flush, "kchaos-flush");   // lingering batches go out now
        flusher.setDaemon(true);
        flusher.start();
        long deadline = System.nanoTime() + (long) (flushTimeoutS * 1e9);
        while (outstanding.get() > 0 && System.nanoTime() < deadline) {
            try {
                Thread.sleep(10);
            } catch (InterruptedException e) {
                break;
            }
        }
        out.flush();
    }

    /** The exception's simple class name; a bare KafkaException is named by what it wraps. */
    static String errorName(Throwable e) {
        Throwable t = e;
        while (t.getClass() == KafkaException.class && t.getCause() != null && t.getCause() != t) {
            t = t.getCause();
        }
        return t.getClass().getSimpleName();
    }

    /** Errors after which the record is definitely not in any log (the contract's list). */
    static boolean definitelyNotWritten(Exception e) {
        return e instanceof RecordTooLargeException || e instanceof RecordBatchTooLargeException
                || e instanceof InvalidRecordException || e instanceof TopicAuthorizationException
                || e instanceof SerializationException || e instanceof TransactionAbortedException;
    }

    private final class Sent implements Callback {
        private final long seq;

        Sent(long seq) {
            this.seq = seq;
        }

        @Override
        public void onCompletion(RecordMetadata metadata, Exception e) {
            // called back on the sending thread from inside send(): refused before it entered the client
            boolean refusedAtOnce = Thread.currentThread() == sendingThread && sendingSeq == seq;
            String status = e == null ? "ok" : refusedAtOnce || definitelyNotWritten(e) ? "fail" : "unknown";
            Integer partition = metadata != null && metadata.partition() >= 0 ? metadata.partition() : null;
            Long offset = e == null && offsetsKnown && metadata != null && metadata.hasOffset()
                    ? metadata.offset() : null;
            out.add(Lines.completed(status, seq, partition, offset, child.nowNs(), e == null ? null : errorName(e)));
            outstanding.decrementAndGet();
        }
    }
}
