package io.kchaos.workload;

import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.TimeoutException;

/**
 * The Java twin of workloads/txn_policy.py: what a transactional application does when ending a transaction
 * fails ({@code on_commit_error}: replace, retry or abort), the same decisions for both clients.
 *
 * <p>KafkaProducer.commitTransaction's javadoc (3.9, 4.3): after a TimeoutException (or InterruptException) "it
 * is safe to retry in either case, but it is not possible to attempt a different operation (such as
 * abortTransaction) since the commit may already be in the progress of completing. If not retrying, the only
 * option is to close the producer". An abortTransaction attempted anyway (on_commit_error abort) is refused with
 * an IllegalStateException ("the previous call to `commitTransaction` timed out and must be retried"): the
 * refusal is recorded and the commit resumed, so the outcome is the one the client reports.
 */
final class TxnPolicy {
    static final String REPLACE = "replace";
    static final String RETRY = "retry";
    static final String ABORT = "abort";

    private TxnPolicy() {
    }

    static String of(com.fasterxml.jackson.databind.JsonNode txns) {
        com.fasterxml.jackson.databind.JsonNode policy = txns.get("on_commit_error");
        String p = policy == null || policy.isNull() ? REPLACE : policy.asText();
        if (!p.equals(REPLACE) && !p.equals(RETRY) && !p.equals(ABORT)) {
            throw new Spec.BadInput("on_commit_error must be replace, retry or abort, not " + p);
        }
        return p;
    }

    /** fatal, abortable, retriable, refused or other: a commit's or abort's error as KafkaProducer's javadoc has it. */
    static String kind(Throwable error, String calling, boolean choosingAbort) {
        if (Child.isFatal(error)) {
            return "fatal";
        }
        if (calling.equals("abort") && choosingAbort && error instanceof IllegalStateException) {
            return "refused";
        }
        if (error instanceof TimeoutException || error instanceof InterruptException) {
            return "retriable";   // only the same call may follow
        }
        if (calling.equals("commit") && error instanceof KafkaException) {
            return "abortable";   // a send that failed, TransactionAbortableException, ...
        }
        return "other";
    }

    /** The call after {@code calling} failed with an error of {@code kind}; null: give up (unknown, exit 4). */
    static String nextCall(String policy, String calling, String kind, boolean pastDeadline, boolean abortRefused) {
        switch (kind) {
            case "fatal":
            case "other":
                return null;
            case "refused":
                return calling.equals("abort") ? "commit" : null;
            case "abortable":
                return calling.equals("commit") ? "abort" : null;
            default:
                break;
        }
        if (policy.equals(REPLACE) && pastDeadline) {
            return null;
        }
        if (calling.equals("commit") && policy.equals(ABORT) && !abortRefused) {
            return "abort";
        }
        return calling;
    }

    /** One transaction's way to its end: the call to make now and what the errors so far say. */
    static final class End {
        final String policy;
        String calling;
        boolean abortChosen;
        boolean abortRefused;
        private String refusal;
        private String last;

        End(String policy, String calling, String why) {
            this.policy = policy;
            this.calling = calling;
            this.last = why;
        }

        String why() {
            if (refusal == null) {
                return last;
            }
            return last == null ? refusal : refusal + "; " + last;
        }

        boolean choosingAbort() {
            return calling.equals("abort") && abortChosen && !abortRefused;
        }

        /** The call failed with an error of {@code kind}: true to give up, else {@link #calling} is the next call. */
        boolean failed(String kind, String name, boolean pastDeadline) {
            String step = nextCall(policy, calling, kind, pastDeadline, abortRefused);
            if (step == null) {
                return true;
            }
            if (kind.equals("refused")) {
                abortRefused = true;
                refusal = last + ", abort refused (" + name + "): commit resumed";
                last = null;
            } else if (step.equals(calling)) {
                last = "retried after " + name;
            } else if (kind.equals("abortable")) {
                last = "commit failed: " + name;
            } else {
                abortChosen = true;
                last = "commit failed: " + name + ", aborted (on_commit_error abort)";
            }
            calling = step;
            return false;
        }
    }
}
