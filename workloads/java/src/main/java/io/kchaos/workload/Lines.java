package io.kchaos.workload;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Protocol lines to stdout (workloads/protocol.py): each {@link #send} is one write of whole lines, and lines
 * {@link #add}ed from any thread (Kafka callbacks) are written within {@link #FLUSH_MS} ms, before the next
 * send, or at {@link #flush}. Writes are serialized, so lines appear in the order they were added or sent.
 * A broken stdout means the harness is gone: halt(3) at once. After {@link #end} nothing more is written (a line
 * after E would make the harness think the process did not stop cleanly).
 */
public final class Lines {
    static final int FLUSH_MS = 5;
    private static final String NULL = "-";

    private final FileOutputStream stdout = new FileOutputStream(FileDescriptor.out);
    private final Object writeLock = new Object();
    private StringBuilder buffer = new StringBuilder(1 << 16);   // guarded by itself... swapped under `this`
    private boolean ended;                                         // guarded by writeLock

    Lines() {
        Thread flusher = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(FLUSH_MS);
                } catch (InterruptedException e) {
                    return;
                }
                flush();
            }
        }, "kchaos-lines");
        flusher.setDaemon(true);
        flusher.start();
    }

    /** Buffer one line; written within a few ms (thread-safe, cheap: for callbacks). */
    public void add(String line) {
        synchronized (this) {
            buffer.append(line).append('\n');
        }
    }

    /** Whatever is buffered, then these lines, in one write. */
    public void send(List<String> lines) {
        synchronized (writeLock) {
            StringBuilder out = take();
            for (String line : lines) {
                out.append(line).append('\n');
            }
            write(out);
        }
    }

    /** One line, after whatever is buffered, in one write. */
    public void send(String line) {
        send(List.of(line));
    }

    /** Write what is buffered now. */
    public void flush() {
        synchronized (writeLock) {
            write(take());
        }
    }

    /** Flush, then E; nothing is written after it. */
    void end() {
        synchronized (writeLock) {
            StringBuilder out = take();
            out.append("E\n");
            write(out);
            ended = true;
        }
    }

    private StringBuilder take() {
        synchronized (this) {
            StringBuilder out = buffer;
            buffer = new StringBuilder(Math.max(1 << 12, out.length()));
            return out;
        }
    }

    private void write(StringBuilder out) {
        if (ended || out.length() == 0) {
            return;
        }
        try {
            stdout.write(out.toString().getBytes(StandardCharsets.US_ASCII));
        } catch (IOException e) {   // the harness is gone: nobody to tell anything
            Runtime.getRuntime().halt(Main.EXIT_HARNESS_GONE);
        }
    }

    // ------------------------------------------------------------------ the lines (workloads/protocol.py)

    static String opt(Object value) {
        return value == null ? NULL : value.toString();
    }

    public static String hello(long pid) {
        return "H " + pid;
    }

    public static String invoked(long first, long count, long invokeNs) {
        return "I " + first + " " + count + " " + invokeNs;
    }

    public static String withdrawn(long first, long count) {
        return "X " + first + " " + count;
    }

    /** {@code S <status> <seq> <partition|-> <offset|-> <complete_ns> <error|->}. */
    public static String completed(String status, long seq, Integer partition, Long offset, long completeNs,
                                   String error) {
        return "S " + status + " " + seq + " " + opt(partition) + " " + opt(offset) + " " + completeNs + " "
                + opt(error);
    }

    public static String txnBegun(long txn, long beginNs) {
        return "T " + txn + " " + beginNs;
    }

    public static String txnRequested(long txn, String intent, long invokeNs) {
        return "C " + txn + " " + intent + " " + invokeNs;
    }

    public static String txnOutcome(long txn, String outcome, long completeNs, String error) {
        return "O " + txn + " " + outcome + " " + completeNs + " " + opt(error);
    }

    public static String polled(long count, long pollNs) {
        return "P " + count + " " + pollNs;
    }

    /** {@code R <partition> <offset> <producer|-> <seq|-> <time_ns>}. */
    public static String processed(int partition, long offset, String producer, Long seq, long timeNs) {
        return "R " + partition + " " + offset + " " + opt(producer) + " " + opt(seq) + " " + timeNs;
    }

    /** {@code A <assignment> <change> <partitions> <time_ns>}: partitions comma-separated, never none. */
    public static String assignmentChanged(long assignment, String change, String partitions, long timeNs) {
        return "A " + assignment + " " + change + " " + partitions + " " + timeNs;
    }

    /** {@code V <partition> <offset> <producer|-> <seq|-> <delivery> <time_ns>}: a share consumer's delivery. */
    public static String delivered(int partition, long offset, String producer, Long seq, long delivery,
                                   long timeNs) {
        return "V " + partition + " " + offset + " " + opt(producer) + " " + opt(seq) + " " + delivery + " "
                + timeNs;
    }

    /** {@code Q <partition> <offset> <delivery> <ack> <result> <time_ns> <error|->}: what came of its ack. */
    public static String acknowledged(int partition, long offset, long delivery, String ack, String result,
                                      long timeNs, String error) {
        return "Q " + partition + " " + offset + " " + delivery + " " + ack + " " + result + " " + timeNs + " "
                + opt(error);
    }

    public static final String BATCH_DONE = "D";
}
