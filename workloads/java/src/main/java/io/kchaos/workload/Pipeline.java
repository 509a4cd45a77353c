package io.kchaos.workload;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.TimeoutException;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * The Java twin of workloads/pipeline.py PipelineLoop: an exactly-once consume-transform-produce application. A
 * read_committed consumer of the pipeline's group polls a batch of the input (at most {@code batch} records); one
 * transaction writes an output per input ({@code <pipeline>:<seq>:<from_producer>:<from_seq>:}) and the batch's
 * positions (sendOffsetsToTransaction with the consumer's group metadata), and commits. An abortable error aborts
 * it and rewinds the consumer to the group's committed offsets; a timed-out commit is handled as on_commit_error
 * says (TxnPolicy; a commit that ends aborted rewinds too); a fatal one (fenced, a transactional call that did not
 * end within commit_timeout_s under replace) reports the transaction unknown and exits 4, and the harness starts a new
 * process under the same transactional.id, which fences what is left of this one.
 *
 * <p>Lines: the consumer's P/R/D for the input, T/C/O and S for the output, and {@code J <seq> <from_producer>
 * <from_seq> <invoke_ns>} announcing each output (with the input it is made from) before send(). The blocking
 * transactional calls run on a worker thread so that commit_timeout_s bounds them whatever max.block.ms says (as
 * TransactionalProducer); a call still blocked when that time is up cannot be followed by an abort, so its
 * transaction is unknown and the process exits 4.
 */
public final class Pipeline {
    static final Duration POLL = Duration.ofMillis(500);
    static final Duration CALL = Duration.ofSeconds(10);   // one committed()/position() request (CALL_TIMEOUT_S)
    static final String ISOLATION = "read_committed";      // the input: only what its producers committed

    private final Child child;
    private final Lines out;
    private final String name;
    private final String inputTopic;
    private final String outputTopic;
    private final long commitTimeoutNs;
    private final double processingMs;
    private final String onCommitError;   // replace, retry or abort (TxnPolicy)
    private final Map<String, Object> producerProps;
    private final KafkaConsumer<byte[], byte[]> consumer;
    private final KafkaProducer<byte[], byte[]> producer;
    private final ExecutorService worker = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "kchaos-txn");
        t.setDaemon(true);
        return t;
    });
    private final Map<Integer, Long> committed = new HashMap<>();   // partition -> the group's offset, as known here
    private long seq;         // the next output seq of this process
    private long txn = -1;    // the current (or last) transaction number

    /** The current transaction must be aborted (an abortable error, or offsets the coordinator never took). */
    static final class TransactionFailed extends Exception {
        TransactionFailed(String why) {
            super(why);
        }
    }

    private Pipeline(Spec spec, Child child) {
        this.child = child;
        this.out = child.out;
        this.name = child.name;
        this.inputTopic = spec.str("input_topic");
        this.outputTopic = spec.str("output_topic");
        this.commitTimeoutNs = (long) (spec.number("commit_timeout_s") * 1e9);
        this.processingMs = spec.number("processing_ms");
        Map<String, Object> consumerProps = Consumer.settings(spec, Spec.settings(spec.node("consumer_config")),
                "manual", ISOLATION);
        consumerProps.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Long.toString(spec.integer("batch")));
        this.consumer = Consumer.open(consumerProps);
        JsonNode txns = spec.node("transactions");
        this.onCommitError = TxnPolicy.of(txns);
        producerProps = Spec.settings(spec.node("producer_config"));
        producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, spec.str("bootstrap_servers"));
        producerProps.put(ProducerConfig.CLIENT_ID_CONFIG, "kchaos-" + name);
        producerProps.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txns.get("transactional_id").asText());
        producerProps.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, txns.get("timeout_ms").asText());
        this.producer = new KafkaProducer<>(CheckConfig.withSerdes("producer", producerProps));
    }

    public static void run(Spec spec, Child child) {
        new Pipeline(spec, child).loop();
    }

    // ------------------------------------------------------------ the loop

    private void loop() {
        // before initTransactions: a replacement may wait there
        child.hello("producer", producerProps, Map.of("on_commit_error", onCommitError));
        try {
            if (!init()) {
                return;
            }
            consumer.subscribe(List.of(inputTopic), new Assignments(child, this::forget));
            while (!child.stopping()) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(POLL);
                if (!records.isEmpty()) {
                    transact(records);
                } else {
                    commitSkipped();
                }
            }
        } finally {
            try {
                consumer.close(CALL);   // leaves the group at once: the partitions go to the others (or a successor)
            } catch (KafkaException e) {
                // what matters is committed in the transactions already
            }
        }
    }

    private void forget(Collection<TopicPartition> partitions) {
        for (TopicPartition tp : partitions) {
            committed.remove(tp.partition());
        }
    }

    /** initTransactions until it answers (it fences a predecessor); retried after a time-out; false: stopped. */
    private boolean init() {
        while (!child.stopping()) {
            Future<?> call = worker.submit(producer::initTransactions);
            while (!call.isDone()) {
                if (child.sleep(50_000_000)) {
                    return false;   // stopping: nothing began, nothing to end
                }
            }
            try {
                call.get();
                return true;
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TimeoutException)) {
                    throw fatal(e.getCause());
                }
            } catch (InterruptedException e) {
                throw new InterruptException(e);
            }
        }
        return false;
    }

    /** One batch in one transaction: outputs, offsets, commit (or abort and rewind). */
    private void transact(ConsumerRecords<byte[], byte[]> records) {
        List<ConsumerRecord<byte[], byte[]>> batch = new ArrayList<>(records.count());
        records.forEach(batch::add);
        List<String> lines = new ArrayList<>(2 * batch.size() + 2);
        lines.add(Lines.polled(batch.size(), child.nowNs()));
        begin(lines);
        long first = seq;
        for (ConsumerRecord<byte[], byte[]> r : batch) {   // every output announced before any is sent
            Messages.Origin from = Messages.decode(r.value());
            long now = child.nowNs();
            lines.add(Lines.processed(r.partition(), r.offset(), from.producer(), from.seq(), now));
            lines.add(joined(seq, from, now));
            seq++;
        }
        out.send(lines);
        try {
            for (int i = 0; i < batch.size(); i++) {
                produce(first + i, batch.get(i), first + batch.size());
            }
            work();
            finish(positions());
        } catch (TransactionFailed e) {
            abort(e.getMessage());
            rewind();
        }
        out.send(Lines.BATCH_DONE);
    }

    /** {@code J <seq> <from_producer> <from_seq> <invoke_ns>}: output seq is about to be sent, made from this input. */
    static String joined(long seq, Messages.Origin from, long invokeNs) {
        return "J " + seq + " " + Lines.opt(from.producer()) + " " + Lines.opt(from.seq()) + " " + invokeNs;
    }

    /**
     * Idle: when the consumer moved past records it never returned (control records, aborted transactions of the
     * input), commit those positions in a transaction of offsets only, so that the group's committed offsets reach
     * the end of the input (what the harness waits for).
     */
    private void commitSkipped() {
        List<Map.Entry<TopicPartition, Long>> ahead = new ArrayList<>(positions().entrySet());
        Set<TopicPartition> unknown = new java.util.HashSet<>();
        for (Map.Entry<TopicPartition, Long> e : ahead) {
            if (!committed.containsKey(e.getKey().partition())) {
                unknown.add(e.getKey());
            }
        }
        if (!unknown.isEmpty()) {
            try {
                Map<TopicPartition, OffsetAndMetadata> known = consumer.committed(unknown, CALL);
                for (TopicPartition tp : unknown) {
                    OffsetAndMetadata o = known.get(tp);
                    committed.put(tp.partition(), o == null ? -1L : o.offset());
                }
            } catch (KafkaException e) {
                return;   // the group coordinator is away: the next idle turn asks again
            }
        }
        Map<TopicPartition, Long> behind = new LinkedHashMap<>();
        for (Map.Entry<TopicPartition, Long> e : ahead) {
            if (e.getValue() > committed.getOrDefault(e.getKey().partition(), e.getValue())) {
                behind.put(e.getKey(), e.getValue());
            }
        }
        if (behind.isEmpty()) {
            return;
        }
        List<String> lines = new ArrayList<>(1);
        begin(lines);
        out.send(lines);
        try {
            finish(behind);
        } catch (TransactionFailed e) {
            abort(e.getMessage());
            rewind();
        }
    }

    // ------------------------------------------------------------ one transaction

    private void begin(List<String> lines) {
        try {
            producer.beginTransaction();
        } catch (KafkaException | IllegalStateException e) {   // fenced, or a state error: nothing was open
            throw fatal(e);
        }
        txn++;
        lines.add(Lines.txnBegun(txn, child.nowNs()));
    }

    /** send() the output of seq; when send() itself refuses, this and the batch's later seqs were never sent. */
    private void produce(long s, ConsumerRecord<byte[], byte[]> input, long end) throws TransactionFailed {
        Messages.Origin from = Messages.decode(input.value());
        byte[] value = from.producer() == null || from.seq() == null ? Messages.encode(name, s, 0)   // not ours
                : Messages.encodeOutput(name, s, from.producer(), from.seq());
        try {
            producer.send(new ProducerRecord<>(outputTopic, Messages.key(s), value), new Sent(s));
        } catch (KafkaException | IllegalStateException e) {   // refused before it entered the client
            if (Child.isFatal(e)) {
                throw unknown(Producer.errorName(e), e);
            }
            long now = child.nowNs();
            for (long rest = s; rest < end; rest++) {   // announced, never handed over: definitely not written
                out.add(Lines.completed("fail", rest, null, null, now, Producer.errorName(e)));
            }
            throw new TransactionFailed(Producer.errorName(e));
        }
    }

    private final class Sent implements Callback {
        private final long seq;

        Sent(long seq) {
            this.seq = seq;
        }

        @Override
        public void onCompletion(RecordMetadata metadata, Exception e) {
            Integer partition = metadata != null && metadata.partition() >= 0 ? metadata.partition() : null;
            String status = e == null ? "ok" : Producer.definitelyNotWritten(e) ? "fail" : "unknown";
            Long offset = e == null && metadata.hasOffset() ? metadata.offset() : null;
            out.add(Lines.completed(status, seq, partition, offset, child.nowNs(),
                    e == null ? null : Producer.errorName(e)));
        }
    }

    /** The application at work on the batch, its outputs sent but not committed: where a crash leaves it open. */
    private void work() {
        if (processingMs > 0) {
            try {
                Thread.sleep(Math.round(processingMs));   // callbacks are written meanwhile (Lines flushes)
            } catch (InterruptedException e) {
                throw new InterruptException(e);
            }
        }
    }

    /** Where the consumer stands on each assigned partition: the offsets a transaction commits. */
    private Map<TopicPartition, Long> positions() {
        Map<TopicPartition, Long> at = new LinkedHashMap<>();
        try {
            for (TopicPartition tp : consumer.assignment()) {
                at.put(tp, consumer.position(tp, CALL));
            }
        } catch (KafkaException e) {
            return Map.of();
        }
        return at;
    }

    /** Send the offsets and commit: {@code O committed}; TransactionFailed when it must be aborted instead. */
    private void finish(Map<TopicPartition, Long> positions) throws TransactionFailed {
        if (!positions.isEmpty()) {
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            positions.forEach((tp, offset) -> offsets.put(tp, new OffsetAndMetadata(offset)));
            String timedOut = retrying("sendOffsetsToTransaction",
                    () -> producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata()));
            if (timedOut != null) {   // nothing asked to commit yet: give this batch up and do it again
                throw new TransactionFailed("sendOffsetsToTransaction unanswered (" + timedOut + ")");
            }
        }
        out.send(Lines.txnRequested(txn, "commit", child.nowNs()));
        if (commit()) {
            positions.forEach((tp, offset) -> committed.put(tp.partition(), offset));
        } else {   // aborted instead: the batch is read (and written) again
            rewind();
        }
    }

    /**
     * commitTransaction as the client's errors and on_commit_error allow (TxnPolicy): true when the client said
     * committed, false when it said aborted (O reports either, the intent stays commit); the fatal exit with the
     * outcome unknown otherwise. Under replace a call still blocked in the client at commit_timeout_s is unknown
     * (nothing may follow it); under retry and abort it is waited for (max.block.ms bounds it).
     */
    private boolean commit() {
        long started = System.nanoTime();
        boolean replace = onCommitError.equals(TxnPolicy.REPLACE);
        TxnPolicy.End end = new TxnPolicy.End(onCommitError, "commit", null);
        Future<?> call = null;
        while (true) {
            long left = replace ? Math.max(started + commitTimeoutNs - System.nanoTime(), 100_000_000L)
                    : commitTimeoutNs;
            if (call == null) {
                call = worker.submit(end.calling.equals("abort") ? producer::abortTransaction
                        : producer::commitTransaction);
            }
            try {
                call.get(left, TimeUnit.NANOSECONDS);
                boolean done = end.calling.equals("commit");
                out.send(Lines.txnOutcome(txn, done ? "committed" : "aborted", child.nowNs(), end.why()));
                return done;
            } catch (java.util.concurrent.TimeoutException e) {   // still inside the client
                if (replace) {
                    throw unknown(end.calling + " did not complete within " + seconds() + "s", null);
                }
            } catch (InterruptedException e) {
                throw new InterruptException(e);
            } catch (ExecutionException e) {
                call = null;
                Throwable error = e.getCause();
                String kind = TxnPolicy.kind(error, end.calling, end.choosingAbort());
                if (end.failed(kind, Producer.errorName(error), System.nanoTime() - started >= commitTimeoutNs)) {
                    if (kind.equals("retriable")) {   // replace: committed or not, nobody knows
                        throw unknown(end.calling + " did not complete within " + seconds() + "s ("
                                + end.why() + ")", null);
                    }
                    throw unknown(Producer.errorName(error), error);
                }
            }
        }
    }

    /** Abort the open transaction: {@code O aborted} (why as its error), or the fatal exit when it won't. */
    private void abort(String why) {
        out.send(Lines.txnRequested(txn, "abort", child.nowNs()));
        String timedOut;
        try {
            timedOut = retrying("abort", producer::abortTransaction);
        } catch (TransactionFailed e) {
            throw unknown("abort failed: " + e.getMessage(), null);
        }
        if (timedOut != null) {
            throw unknown("abort did not complete within " + seconds() + "s (" + timedOut + ")", null);
        }
        out.send(Lines.txnOutcome(txn, "aborted", child.nowNs(), why));
    }

    /**
     * {@code call} on the worker thread, again after each TimeoutException (the only error after which the same
     * call may follow), for commit_timeout_s in all: null when it returned, the last error's name when it was
     * still timing out at the end. TransactionFailed for an abortable error; a fatal one, or a call still blocked
     * in the client when the time is up, reports the transaction unknown and ends the process.
     */
    private String retrying(String what, Runnable call) throws TransactionFailed {
        long deadline = System.nanoTime() + commitTimeoutNs;
        while (true) {
            Future<?> f = worker.submit(call);
            try {
                f.get(Math.max(deadline - System.nanoTime(), 100_000_000L), TimeUnit.NANOSECONDS);
                return null;
            } catch (java.util.concurrent.TimeoutException e) {   // still inside the client: nothing may follow
                throw unknown(what + " did not complete within " + seconds() + "s", null);
            } catch (InterruptedException e) {
                throw new InterruptException(e);
            } catch (ExecutionException e) {
                Throwable error = e.getCause();
                if (error instanceof TimeoutException) {
                    if (System.nanoTime() >= deadline) {
                        return Producer.errorName(error);
                    }
                    continue;
                }
                if (Child.isFatal(error) || !(error instanceof KafkaException)) {
                    throw unknown(Producer.errorName(error), error);
                }
                throw new TransactionFailed(Producer.errorName(error));   // abortable: abort, then read it again
            }
        }
    }

    /** Report the open transaction's outcome unknown; the exception that ends the process (exit 4). */
    private RuntimeException unknown(String why, Throwable cause) {
        out.send(Lines.txnOutcome(txn, "unknown", child.nowNs(), why));
        return cause != null && Child.isFatal(cause) && cause instanceof RuntimeException r ? r
                : new Child.Fatal("transaction " + txn + ": " + why, cause);
    }

    private static RuntimeException fatal(Throwable e) {
        return Child.isFatal(e) && e instanceof RuntimeException r ? r : new Child.Fatal(Main.describe(e), e);
    }

    /** Back to the group's committed offsets: the aborted batch is read (and written) again. */
    private void rewind() {
        Set<TopicPartition> assigned = consumer.assignment();
        if (assigned.isEmpty()) {
            return;
        }
        long deadline = System.nanoTime() + commitTimeoutNs;
        Map<TopicPartition, OffsetAndMetadata> offsets;
        while (true) {
            try {
                offsets = consumer.committed(assigned, CALL);
                break;
            } catch (KafkaException e) {   // going on from here would commit past the aborted batch
                if (System.nanoTime() > deadline) {
                    throw new Child.Fatal("cannot rewind to the committed offsets: " + Main.describe(e), e);
                }
                child.sleep(100_000_000);
            }
        }
        try {
            for (TopicPartition tp : assigned) {
                OffsetAndMetadata o = offsets.get(tp);
                if (o == null) {
                    committed.put(tp.partition(), -1L);
                    consumer.seekToBeginning(List.of(tp));
                } else {
                    committed.put(tp.partition(), o.offset());
                    consumer.seek(tp, o.offset());
                }
            }
        } catch (KafkaException | IllegalStateException e) {
            throw new Child.Fatal("cannot rewind to the committed offsets: " + Main.describe(e), e);
        }
    }

    private String seconds() {
        double s = commitTimeoutNs / 1e9;
        return s == Math.rint(s) ? Long.toString((long) s) : Double.toString(s);
    }
}
