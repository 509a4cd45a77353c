package io.kchaos.workload;

import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;

/**
 * The Java workload program: {@code Main <role> <spec json>}, the Java twin of {@code python -m workloads.<role>}
 * (clusters/java_build.py builds it; workloads/java_client.py starts it). Roles: producer, consumer, reader, pipeline, share_consumer, and
 * {@code check-config <producer|consumer> <config json>}.
 *
 * <h2>The API a role gets (Consumer, Reader, Pipeline)</h2>
 * Each role is {@code static void run(Spec spec, Child child)}; returning means it finished cleanly (Main then
 * writes {@code E} and exits 0).
 * <ul>
 * <li>{@code child.spec}: the spec ({@code spec.str("topic")}, {@code spec.integer("partitions")},
 *     {@code spec.number("timeout_s")}, {@code spec.optional("isolation")} (null when absent or JSON null),
 *     {@code spec.node("high")} (Jackson JsonNode), {@code spec.config()} (the scenario's client settings as
 *     Kafka properties: a mutable Map of strings), {@code spec.flag("verbose")}); {@code child.name}.</li>
 * <li>{@code child.hello(kind, props)}: writes {@code H <pid>} and {@code K java <version> <effective settings>}
 *     in one write; kind "producer" or "consumer", props the map the client was made with. Call it once the
 *     client is constructed, before anything else is written.</li>
 * <li>{@code child.out.send(List<String>)} / {@code send(String)}: whatever is buffered, then these lines, in one
 *     write. {@code child.out.add(String)}: buffer one line (thread-safe, for callbacks), written within 5 ms or
 *     by the next send/flush. {@code child.out.flush()}. Never write E yourself: Main does it.</li>
 * <li>Line formatters: {@code Lines.polled(count, ns)}, {@code Lines.processed(partition, offset, producer, seq,
 *     ns)}, {@code Lines.BATCH_DONE}, {@code Lines.txnBegun/txnRequested/txnOutcome}, {@code Lines.invoked},
 *     {@code Lines.completed}, {@code Lines.withdrawn}, {@code Lines.opt(x)} ("-" for null).</li>
 * <li>{@code child.stopping()}: the harness said stop; {@code child.sleep(nanos)} waits, waking at a stop;
 *     {@code child.nowNs()}: nanoseconds of the run's clock (System.nanoTime() - origin_ns).</li>
 * <li>Values and keys: {@code Messages.key(seq)}, {@code Messages.encode(producer, seq, size)},
 *     {@code Messages.encodeOutput(pipeline, seq, fromProducer, fromSeq)}, {@code Messages.decode(bytes)} and
 *     {@code Messages.decodeSource(bytes)} -> {@code Origin(producer, seq)} (null fields when not ours).</li>
 * <li>Failing: throw {@code new Child.Fatal(message)} (or let a fatal Kafka exception out:
 *     {@code Child.isFatal(e)} says which are) -> message on stderr, exit 4, the harness replaces the process.
 *     {@code Spec.BadInput} -> one line, exit 2. Anything else -> stack trace, exit 1.</li>
 * </ul>
 * EOF on stdin (the harness is gone) or a broken stdout halts the JVM with 3 at once, from any thread.
 */
public final class Main {
    static final int EXIT_OK = 0;
    static final int EXIT_ERROR = 1;
    static final int EXIT_BAD_INPUT = 2;
    static final int EXIT_HARNESS_GONE = 3;
    static final int EXIT_FATAL_CLIENT_ERROR = 4;
    private static final byte[] STOP = "stop\n".getBytes(StandardCharsets.US_ASCII);

    private Main() {
    }

    public static void main(String[] args) {
        int code;
        try {
            code = dispatch(args);
        } catch (Spec.BadInput e) {
            System.err.println("kchaos workload: " + e.getMessage());
            code = EXIT_BAD_INPUT;
        } catch (Throwable e) {
            if (Child.isFatal(e)) {
                System.err.println("fatal Kafka client error: " + describe(e));
                code = EXIT_FATAL_CLIENT_ERROR;
            } else {
                StringWriter trace = new StringWriter();
                e.printStackTrace(new PrintWriter(trace));
                System.err.print(trace);
                code = EXIT_ERROR;
            }
        }
        System.err.flush();
        System.out.flush();
        Runtime.getRuntime().halt(code);   // no shutdown: the client's threads just end, as os._exit in Python
    }

    private static int dispatch(String[] args) throws Exception {
        if (args.length == 3 && "check-config".equals(args[0])) {
            quietLogs(false);
            CheckConfig.run(args[1], args[2]);
            return EXIT_OK;
        }
        if (args.length != 2) {
            throw new Spec.BadInput("usage: Main <producer|consumer|reader|pipeline|share_consumer> <spec json> | "
                    + "Main check-config <producer|consumer> <config json>");
        }
        Spec spec = Spec.parse(args[1]);
        quietLogs(spec.flag("verbose"));
        Child child = new Child(spec, new Lines());
        watchStdin(child);
        switch (args[0]) {
            case "producer" -> {
                if (spec.optional("transactions") == null) {
                    Producer.run(spec, child);
                } else {
                    TransactionalProducer.run(spec, child);
                }
            }
            case "consumer" -> Consumer.run(spec, child);
            case "reader" -> Reader.run(spec, child);
            case "pipeline" -> Pipeline.run(spec, child);
            case "share_consumer" -> runShareConsumer(spec, child);
            default -> throw new Spec.BadInput("unknown role " + args[0]);
        }
        child.out.end();
        return EXIT_OK;
    }

    /** ShareConsumer is built only against kafka-clients that have a share consumer: found by name. */
    private static void runShareConsumer(Spec spec, Child child) throws Exception {
        Class<?> role;
        try {
            role = Class.forName("io.kchaos.workload.ShareConsumer");
        } catch (ClassNotFoundException e) {
            throw new Spec.BadInput("kafka-clients " + Child.clientsVersion() + " has no share consumer (4.2 and later)");
        }
        try {
            role.getMethod("run", Spec.class, Child.class).invoke(null, spec, child);
        } catch (java.lang.reflect.InvocationTargetException e) {
            if (e.getCause() instanceof Exception cause) {
                throw cause;
            }
            throw e;
        }
    }

    /** slf4j-simple logs to stderr at WARN (java_command's flag); ERROR only when the harness is not verbose. */
    private static void quietLogs(boolean verbose) {
        if (!verbose) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "error");
        }
    }

    /** "stop" on stdin asks the role to finish; EOF means the harness died: halt(3) now. */
    private static void watchStdin(Child child) {
        Thread t = new Thread(() -> {
            InputStream in = new FileInputStream(FileDescriptor.in);
            byte[] buf = new byte[4096];
            int matched = 0;   // bytes of "stop\n" matched so far, across reads
            try {
                int n;
                while ((n = in.read(buf)) > 0) {
                    for (int i = 0; i < n; i++) {
                        matched = buf[i] == STOP[matched] ? matched + 1 : (buf[i] == STOP[0] ? 1 : 0);
                        if (matched == STOP.length) {
                            child.stop();
                            matched = 0;
                        }
                    }
                }
            } catch (IOException e) {
                // a closed stdin is the harness gone too
            }
            Runtime.getRuntime().halt(EXIT_HARNESS_GONE);
        }, "kchaos-stdin");
        t.setDaemon(true);
        t.start();
    }

    /** The exception's class and message, and its cause's, on one line. */
    static String describe(Throwable e) {
        StringBuilder b = new StringBuilder();
        for (Throwable t = e; t != null && b.length() < 500; t = t.getCause() == t ? null : t.getCause()) {
            if (b.length() > 0) {
                b.append(" <- ");
            }
            b.append(t.getClass().getSimpleName());
            if (t.getMessage() != null) {
                b.append(": ").append(t.getMessage().replace('\n', ' '));
            }
        }
        return b.toString();
    }
}
