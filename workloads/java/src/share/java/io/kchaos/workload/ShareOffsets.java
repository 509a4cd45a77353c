package io.kchaos.workload;

import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.common.TopicPartition;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * What the brokers say of a share group's progress: {@code ShareOffsets <bootstrap> <group> <topic> <partitions>}
 * prints one JSON object, partition -> {start_offset, lag} (Admin.listShareGroupOffsets: the share-partition start
 * offset, below which every record is acknowledged or archived, and how many records from there to the end are
 * not), or exits 1 with the error on stderr. A partition the group has no state for is left out.
 * (harness/share_role.py asks it while the group finishes and once after.)
 */
public final class ShareOffsets {
    private ShareOffsets() {
    }

    public static void main(String[] args) throws Exception {
        String group = args[1];
        String topic = args[2];
        int partitions = Integer.parseInt(args[3]);
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        ObjectNode out = Spec.JSON.createObjectNode();
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0],
                AdminClientConfig.CLIENT_ID_CONFIG, "kchaos-share-offsets"))) {
            Map<TopicPartition, SharePartitionOffsetInfo> info = admin
                    .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec().topicPartitions(tps)))
                    .partitionsToOffsetInfo(group).get(30, TimeUnit.SECONDS);
            for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : info.entrySet()) {
                if (e.getValue() == null) {
                    continue;
                }
                ObjectNode p = out.putObject(Integer.toString(e.getKey().partition()));
                p.put("start_offset", e.getValue().startOffset());
                e.getValue().lag().ifPresentOrElse(lag -> p.put("lag", lag), () -> p.putNull("lag"));
            }
        }
        System.out.println(Spec.JSON.writeValueAsString(out));
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }
}
