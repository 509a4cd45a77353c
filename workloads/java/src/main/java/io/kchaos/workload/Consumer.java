package io.kchaos.workload;

/** The Consumer role: helper B replaces this stub. */
public final class Consumer {
    private Consumer() {
    }

    public static void run(Spec spec, Child child) {
        throw new UnsupportedOperationException("the Java consumer is not written yet");
    }
}
