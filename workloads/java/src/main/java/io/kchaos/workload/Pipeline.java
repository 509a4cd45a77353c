package io.kchaos.workload;

/** The Pipeline role: helper B replaces this stub. */
public final class Pipeline {
    private Pipeline() {
    }

    public static void run(Spec spec, Child child) {
        throw new UnsupportedOperationException("the Java pipeline is not written yet");
    }
}
