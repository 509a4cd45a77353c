package io.kchaos.workload;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.TimeoutException;

import java.nio.charset.StandardCharsets;
import java.util.Random;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * The Java twin of workloads/producer.py TransactionalLoop: transactions of {@code size} messages, spread as
 * seq % partitions, committed, or aborted on purpose with {@code abort_probability} (after a flush, so the abort
 * has written messages to undo), each begun ({@code T}), asked to end ({@code C}) and ended ({@code O}).
 *
 * <p>What a careful application does with KafkaProducer, as its javadoc says in 3.9 and 4.3: fenced, out of
 * order sequence, authorization and unsupported version errors are fatal (the outcome is unknown and the process
 * exits 4; the harness starts a new one under the same transactional.id, which fences this one); a commit that
 * times out is handled as on_commit_error says (TxnPolicy): replace retries it (the javadoc allows only that
 * retry, not a switch to abort) until commit_timeout_s, then the outcome is unknown and the process exits 4;
 * retry retries it until it answers; abort tries abortTransaction (refused: the commit is resumed); any other
 * KafkaException of a commit (an abortable error: a send that failed, TransactionAbortableException) aborts the
 * transaction. A stop lets the open transaction
 * finish and commit. The blocking calls run on a worker thread so that commit_timeout_s bounds them, whatever
 * max.block.ms says.
 */
public final class TransactionalProducer extends Producer {
    private final int size;
    private final double abortProbability;
    private final double commitTimeoutS;
    private final Random rng;
    private final String onCommitError;   // replace, retry or abort (TxnPolicy)
    private final ExecutorService worker = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "kchaos-txn");
        t.setDaemon(true);
        return t;
    });

    private TransactionalProducer(Spec spec, Child child) {
        super(spec, child);
        JsonNode txns = spec.node("transactions");
        this.size = txns.get("size").asInt();
        this.abortProbability = txns.get("abort_probability").asDouble();
        this.commitTimeoutS = txns.get("commit_timeout_s").asDouble();
        this.partitions = txns.get("partitions").asInt();
        // a replacement draws its own, reproducibly: the seed of (seed, name)
        this.rng = new Random(fnv1a(txns.get("seed").asText() + ":" + name));
        this.onCommitError = TxnPolicy.of(txns);
    }

    public static void run(Spec spec, Child child) {
        new TransactionalProducer(spec, child).transact();
    }

    private void transact() {
        // before initTransactions: a replacement may wait there for a coordinator
        child.hello("producer", props, java.util.Map.of("on_commit_error", onCommitError));
        if (!init()) {
            return;
        }
        long seq = 0;
        long txn = 0;
        long started = System.nanoTime();
        while (!child.stopping()) {
            seq = transaction(txn, seq, started);
            txn++;
        }
        out.flush();
    }

    /** A send() that threw ends the transaction in an abort (failIfNotReadyForSend: an abortable error), unless fatal. */
    @Override
    boolean finishedBy(RuntimeException e) {
        return Child.isFatal(e);
    }

    /** initTransactions until it answers (fencing any predecessor), retried after a time-out; false: stopped first. */
    private boolean init() {
        while (!child.stopping()) {
            Future<Void> call = worker.submit(() -> {
                producer.initTransactions();
                return null;
            });
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
                    throw unwrap(e);
                }
            } catch (InterruptedException e) {
                throw new InterruptException(e);
            }
        }
        return false;
    }

    /** One transaction from seq {@code first}; the next seq. */
    private long transaction(long txn, long first, long started) {
        long beginNs = child.nowNs();
        producer.beginTransaction();
        out.send(Lines.txnBegun(txn, beginNs));
        long seq = first;
        long end = first + size;
        refused = null;
        while (seq < end && refused == null) {
            // stopping: the rest of the transaction at once, whatever the rate, and then commit
            long n = Math.min(child.stopping() ? BATCH : due(seq, started), end - seq);
            if (n <= 0) {
                child.sleep(waitNs(seq, started));
            } else {
                try {
                    seq = send(seq, n, false);
                } catch (RuntimeException e) {   // fatal: the open transaction never committed
                    outcome(txn, "unknown", errorName(e));
                    throw e;
                }
            }
        }
        double draw = rng.nextDouble();   // drawn every time: stopping does not shift the later draws
        String why = refused == null ? null : "send failed: " + errorName(refused);
        boolean abort = refused != null || (draw < abortProbability && !child.stopping());
        if (abort && refused == null) {   // let its messages reach the log first: an abort that only purged tests nothing
            Future<?> flush = worker.submit(producer::flush);
            try {
                flush.get((long) (commitTimeoutS * 1e9), TimeUnit.NANOSECONDS);
            } catch (java.util.concurrent.TimeoutException | ExecutionException e) {
                // not all written in time: abort what there is
            } catch (InterruptedException e) {
                throw new InterruptException(e);
            }
        }
        out.send(Lines.txnRequested(txn, abort ? "abort" : "commit", child.nowNs()));
        end(txn, abort, why);
        return seq;
    }

    /**
     * Commit or abort, as the client's errors and on_commit_error allow (TxnPolicy), and report the outcome:
     * committed or aborted only when the client said so. An outcome reached after errors keeps the last one as its
     * error (a commit retried after a time-out is what delayed requests look like).
     */
    private void end(long txn, boolean aborting, String why) {
        long started = System.nanoTime();
        long timeoutNs = (long) (commitTimeoutS * 1e9);
        boolean replace = onCommitError.equals(TxnPolicy.REPLACE);
        TxnPolicy.End end = new TxnPolicy.End(onCommitError, aborting ? "abort" : "commit", why);
        Future<Void> call = null;
        while (true) {
            long left = replace ? started + timeoutNs - System.nanoTime() : timeoutNs;
            if (left <= 0) {
                timedOut(txn, end.calling, end.why());
            }
            if (call == null) {
                boolean abortNow = end.calling.equals("abort");
                call = worker.submit((Callable<Void>) () -> {
                    if (abortNow) {
                        producer.abortTransaction();
                    } else {
                        producer.commitTransaction();
                    }
                    return null;
                });
            }
            try {
                call.get(left, TimeUnit.NANOSECONDS);
                outcome(txn, end.calling.equals("abort") ? "aborted" : "committed", end.why());
                return;
            } catch (java.util.concurrent.TimeoutException e) {   // still blocked in the client
                if (replace) {
                    timedOut(txn, end.calling, end.why());
                }
                // retry, abort: wait on for the same call (max.block.ms bounds it)
            } catch (InterruptedException e) {
                throw new InterruptException(e);
            } catch (ExecutionException e) {
                call = null;
                Throwable error = e.getCause();
                String kind = TxnPolicy.kind(error, end.calling, end.choosingAbort());
                if (end.failed(kind, errorName(error), System.nanoTime() - started >= timeoutNs)) {
                    if (kind.equals("retriable")) {
                        timedOut(txn, end.calling, end.why());
                    }
                    outcome(txn, "unknown", errorName(error));
                    if (Child.isFatal(error)) {
                        throw unwrap(e);
                    }
                    // an error neither retriable nor abortable: this client cannot be trusted with another transaction
                    throw new Child.Fatal("transaction " + txn + ": " + end.calling + " failed: "
                            + Main.describe(error), error);
                }
            }
        }
    }

    private void timedOut(long txn, String verb, String why) {
        outcome(txn, "unknown", verb + " did not complete within " + seconds(commitTimeoutS) + "s ("
                + (why == null ? "TimeoutException" : why) + ")");
        // the transaction is still in the client's hands: only a new producer can go on
        throw new Child.Fatal("transaction " + txn + " did not end within " + seconds(commitTimeoutS) + "s");
    }

    /** Callbacks so far, then the outcome, in one write. */
    private void outcome(long txn, String outcome, String error) {
        out.send(Lines.txnOutcome(txn, outcome, child.nowNs(), error));
    }

    private static RuntimeException unwrap(ExecutionException e) {
        Throwable cause = e.getCause();
        return cause instanceof RuntimeException r ? r : new KafkaException(cause);
    }

    private static String seconds(double s) {
        return s == Math.rint(s) ? Long.toString((long) s) : Double.toString(s);
    }

    /** A 64-bit FNV-1a hash: the same seed for the same (seed, name) on every JVM. */
    static long fnv1a(String text) {
        long h = 0xcbf29ce484222325L;
        for (byte b : text.getBytes(StandardCharsets.UTF_8)) {
            h ^= b & 0xff;
            h *= 0x100000001b3L;
        }
        return h;
    }
}
