package io.kchaos.workload;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.common.TopicPartition;

import java.util.Collection;
import java.util.function.Consumer;
import java.util.stream.Collectors;

/**
 * The Java twin of workloads/consumer.py Assignments: a consumer's rebalance listener that numbers each change
 * of its partitions and says it to the harness ({@code A}), so that the harness stamps this process's later live
 * reads with that number and the checkers can tell reads within one assignment from reads across a rebalance.
 * A callback with no partitions changes nothing. {@code then} is the caller's own work for the partitions.
 */
final class Assignments implements ConsumerRebalanceListener {
    private final Child child;
    private final Consumer<Collection<TopicPartition>> then;
    private long number;

    Assignments(Child child, Consumer<Collection<TopicPartition>> then) {
        this.child = child;
        this.then = then;
    }

    private void changed(String change, Collection<TopicPartition> partitions) {
        if (!partitions.isEmpty()) {
            number++;
            String list = partitions.stream().map(TopicPartition::partition).sorted().map(String::valueOf)
                    .collect(Collectors.joining(","));
            child.out.send(Lines.assignmentChanged(number, change, list, child.nowNs()));
        }
        then.accept(partitions);
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        changed("assigned", partitions);
    }

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        changed("revoked", partitions);
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
        changed("lost", partitions);
    }
}
