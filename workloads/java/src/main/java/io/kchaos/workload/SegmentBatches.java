package io.kchaos.workload;

import java.io.BufferedWriter;
import java.io.Closeable;
import java.io.File;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.common.errors.CorruptRecordException;
import org.apache.kafka.common.record.TimestampType;

/**
 * Every record batch header of some brokers' log segments, one JSON line each, in the order given:
 * {@code SegmentBatches <node>=<segment.log>,<segment.log>... ...} (clusters/segments.py; the lines are
 * history/replica-batches.jsonl's). Kafka's own reader of its log format ({@code FileRecords}, what
 * DumpLogSegments iterates) from the kafka-clients of the cluster's version; the files are opened read-only.
 * Kafka 4.3 moved FileRecords and RecordBatch to {@code org.apache.kafka.common.record.internal}, so they are
 * looked up by name in either package.
 *
 * <p>The same fields DumpLogSegments prints without {@code --deep-iteration}, without formatting and parsing a
 * hundred bytes of text a batch in every run (benchmarks/README.md has the figures). A segment whose tail cannot be read as batches (a power cut's torn write) ends
 * there, with one line on stderr, as a broker's recovery would truncate it.
 */
public final class SegmentBatches {
    private static final String[] PACKAGES = {"org.apache.kafka.common.record.", "org.apache.kafka.common.record.internal."};
    private static final MethodHandle OPEN;
    private static final MethodHandle BATCHES;
    private static final MethodHandle BASE_OFFSET;
    private static final MethodHandle LAST_OFFSET;
    private static final MethodHandle COUNT;
    private static final MethodHandle PRODUCER_ID;
    private static final MethodHandle PRODUCER_EPOCH;
    private static final MethodHandle BASE_SEQUENCE;
    private static final MethodHandle LAST_SEQUENCE;
    private static final MethodHandle LEADER_EPOCH;
    private static final MethodHandle TRANSACTIONAL;
    private static final MethodHandle CONTROL;
    private static final MethodHandle TIMESTAMP_TYPE;
    private static final MethodHandle MAX_TIMESTAMP;

    static {
        try {
            Class<?> records = recordClass("FileRecords");
            Class<?> batch = recordClass("RecordBatch");
            MethodHandles.Lookup lookup = MethodHandles.publicLookup();
            OPEN = lookup.findStatic(records, "open", MethodType.methodType(records, File.class, boolean.class))
                    .asType(MethodType.methodType(Closeable.class, File.class, boolean.class));
            BATCHES = lookup.findVirtual(records, "batches", MethodType.methodType(Iterable.class))
                    .asType(MethodType.methodType(Iterable.class, Closeable.class));
            BASE_OFFSET = getter(lookup, batch, "baseOffset", long.class);
            LAST_OFFSET = getter(lookup, batch, "lastOffset", long.class);
            COUNT = getter(lookup, batch, "countOrNull", Integer.class);
            PRODUCER_ID = getter(lookup, batch, "producerId", long.class);
            PRODUCER_EPOCH = getter(lookup, batch, "producerEpoch", short.class);
            BASE_SEQUENCE = getter(lookup, batch, "baseSequence", int.class);
            LAST_SEQUENCE = getter(lookup, batch, "lastSequence", int.class);
            LEADER_EPOCH = getter(lookup, batch, "partitionLeaderEpoch", int.class);
            TRANSACTIONAL = getter(lookup, batch, "isTransactional", boolean.class);
            CONTROL = getter(lookup, batch, "isControlBatch", boolean.class);
            TIMESTAMP_TYPE = getter(lookup, batch, "timestampType", TimestampType.class);
            MAX_TIMESTAMP = getter(lookup, batch, "maxTimestamp", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private SegmentBatches() {
    }

    /** A batch's getter as a handle taking any object: the batch class differs between Kafka versions. */
    private static MethodHandle getter(MethodHandles.Lookup lookup, Class<?> batch, String name, Class<?> type)
            throws ReflectiveOperationException {
        return lookup.findVirtual(batch, name, MethodType.methodType(type))
                .asType(MethodType.methodType(type, Object.class));
    }

    private static Class<?> recordClass(String name) {
        for (String pkg : PACKAGES) {
            try {
                return Class.forName(pkg + name);
            } catch (ClassNotFoundException e) {
                // the other package
            }
        }
        throw new ExceptionInInitializerError("kafka-clients has no " + name);
    }

    public static void main(String[] args) throws IOException {
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq <= 0) {
                System.err.println("kchaos segment-batches: expected <node>=<files>, not " + arg);
                System.exit(Main.EXIT_BAD_INPUT);
            }
            String node = arg.substring(0, eq);
            for (String path : arg.substring(eq + 1).split(",")) {
                dump(node, new File(path), out);
            }
        }
        out.flush();
        System.exit(Main.EXIT_OK);
    }

    private static void dump(String node, File segment, BufferedWriter out) throws IOException {
        String dir = segment.getAbsoluteFile().getParentFile().getName();   // <topic>-<partition>
        int dash = dir.lastIndexOf('-');
        String prefix = "{\"node\":\"" + node + "\",\"topic\":\"" + dir.substring(0, dash) + "\",\"partition\":"
                + Integer.parseInt(dir.substring(dash + 1));   // node and topic names need no JSON escaping
        try (Closeable records = (Closeable) OPEN.invokeExact(segment, false)) {
            for (Object batch : (Iterable<?>) BATCHES.invokeExact(records)) {
                StringBuilder line = new StringBuilder(prefix.length() + 240).append(prefix);
                line.append(",\"base_offset\":").append((long) BASE_OFFSET.invokeExact(batch))
                        .append(",\"last_offset\":").append((long) LAST_OFFSET.invokeExact(batch));
                Integer count = (Integer) COUNT.invokeExact(batch);
                if (count != null) {
                    line.append(",\"count\":").append(count.intValue());
                }
                line.append(",\"producer_id\":").append((long) PRODUCER_ID.invokeExact(batch))
                        .append(",\"producer_epoch\":").append((short) PRODUCER_EPOCH.invokeExact(batch))
                        .append(",\"base_sequence\":").append((int) BASE_SEQUENCE.invokeExact(batch))
                        .append(",\"last_sequence\":").append((int) LAST_SEQUENCE.invokeExact(batch))
                        .append(",\"leader_epoch\":").append((int) LEADER_EPOCH.invokeExact(batch))
                        .append(",\"transactional\":").append((boolean) TRANSACTIONAL.invokeExact(batch))
                        .append(",\"control\":").append((boolean) CONTROL.invokeExact(batch));
                if ((TimestampType) TIMESTAMP_TYPE.invokeExact(batch) == TimestampType.CREATE_TIME) {
                    line.append(",\"create_time_ms\":").append((long) MAX_TIMESTAMP.invokeExact(batch));
                }
                out.append(line).append("}\n");
            }
        } catch (CorruptRecordException e) {   // a torn batch: the broker's recovery would truncate here
            torn(segment, e);
        } catch (IOException | RuntimeException | Error e) {
            throw e;
        } catch (Throwable e) {   // invokeExact declares Throwable; the getters throw nothing checked
            throw new IllegalStateException(e);
        }
    }

    private static void torn(File segment, Throwable e) {
        System.err.println("kchaos segment-batches: " + segment + ": read up to a corrupt batch (" + e.getMessage()
                + ")");
    }
}
