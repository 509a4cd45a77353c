package io.kchaos.workload;

/** Stub until the producer lands. */
public final class TransactionalProducer {
    private TransactionalProducer() {
    }

    public static void run(Spec spec, Child child) {
        throw new UnsupportedOperationException("not written yet");
    }
}
