package io.kchaos.workload;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Message values that say who sent them (workloads/messages.py): {@code <producer>:<seq>:<x padding>}, and a
 * pipeline's output {@code <pipeline>:<seq>:<from_producer>:<from_seq>:}. Keys are the seq in decimal.
 */
public final class Messages {
    private Messages() {
    }

    /** A (producer, seq) pair read from a value; null fields for a value kchaos did not write. */
    public record Origin(String producer, Long seq) {
        static final Origin NONE = new Origin(null, null);
    }

    public static byte[] key(long seq) {
        return Long.toString(seq).getBytes(StandardCharsets.US_ASCII);
    }

    public static byte[] encode(String producer, long seq, int size) {
        byte[] head = (producer + ":" + seq + ":").getBytes(StandardCharsets.UTF_8);
        if (head.length >= size) {
            return head;
        }
        byte[] value = Arrays.copyOf(head, size);
        Arrays.fill(value, head.length, size, (byte) 'x');
        return value;
    }

    public static byte[] encodeOutput(String pipeline, long seq, String fromProducer, long fromSeq) {
        return (pipeline + ":" + seq + ":" + fromProducer + ":" + fromSeq + ":").getBytes(StandardCharsets.UTF_8);
    }

    /** (producer, seq) of a value, as messages.decode. */
    public static Origin decode(byte[] value) {
        if (value == null || value.length == 0) {
            return Origin.NONE;
        }
        int first = indexOf(value, 0);
        int second = first < 0 ? -1 : indexOf(value, first + 1);
        if (second < 0) {
            return Origin.NONE;
        }
        Long seq = parseLong(value, first + 1, second);
        String producer = utf8(value, 0, first);
        return seq == null || producer == null ? Origin.NONE : new Origin(producer, seq);
    }

    /** (from_producer, from_seq) of a pipeline output value, as messages.decode_source; NONE for any other. */
    public static Origin decodeSource(byte[] value) {
        if (value == null || value.length == 0) {
            return Origin.NONE;
        }
        int[] colons = new int[4];
        int at = -1;
        for (int i = 0; i < 4; i++) {
            at = indexOf(value, at + 1);
            if (at < 0) {
                return Origin.NONE;
            }
            colons[i] = at;
        }
        if (colons[3] != value.length - 1) {   // exactly four colons, the last one ending the value
            return Origin.NONE;
        }
        Long seq = parseLong(value, colons[2] + 1, colons[3]);
        String producer = utf8(value, colons[1] + 1, colons[2]);
        return seq == null || producer == null ? Origin.NONE : new Origin(producer, seq);
    }

    private static int indexOf(byte[] value, int from) {
        for (int i = from; i < value.length; i++) {
            if (value[i] == ':') {
                return i;
            }
        }
        return -1;
    }

    private static Long parseLong(byte[] value, int from, int to) {
        try {
            return Long.parseLong(new String(value, from, to - from, StandardCharsets.US_ASCII).strip());
        } catch (NumberFormatException e) {
            return null;
        }
    }

    private static String utf8(byte[] value, int from, int to) {
        try {
            return StandardCharsets.UTF_8.newDecoder().decode(java.nio.ByteBuffer.wrap(value, from, to - from))
                    .toString();
        } catch (java.nio.charset.CharacterCodingException e) {
            return null;
        }
    }
}
