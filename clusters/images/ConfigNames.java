import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

/**
 * Prints, as one JSON object, the setting names one Kafka version's broker
 * (server.properties) and topics accept, read from that version's own jars.
 * Run by clusters/config_names.py with the single-file source launcher:
 *   java -cp 'libs/*' ConfigNames.java
 * Broker names: KafkaConfig's ConfigDef (internal settings included) plus
 * every name its documentation generator (KafkaConfig.main) lists.
 * Topic names: LogConfig.configNames(). Producer and consumer names: the
 * version's Java client (ProducerConfig / ConsumerConfig), which a scenario
 * run with workload.client java is checked against.
 */
public class ConfigNames {
    private static final Pattern DOCUMENTED = Pattern.compile("id=\"brokerconfigs_([^\"]+)\"");

    public static void main(String[] args) {
        Set<String> broker = new TreeSet<>(kafka.server.KafkaConfig.configDef().names());
        broker.addAll(documentedBrokerNames());
        Set<String> topic = new TreeSet<>(org.apache.kafka.storage.internals.log.LogConfig.configNames());
        Set<String> producer = new TreeSet<>(org.apache.kafka.clients.producer.ProducerConfig.configNames());
        Set<String> consumer = new TreeSet<>(org.apache.kafka.clients.consumer.ConsumerConfig.configNames());
        System.out.println("{\"kafka_version\": \"" + clientsVersion()
                + "\", \"broker\": " + json(broker) + ", \"topic\": " + json(topic)
                + ", \"producer\": " + json(producer) + ", \"consumer\": " + json(consumer) + "}");
    }

    /** The names in the HTML that Kafka's own docs are generated from (some dynamic ones live only there). */
    private static Set<String> documentedBrokerNames() {
        PrintStream stdout = System.out;
        ByteArrayOutputStream html = new ByteArrayOutputStream();
        System.setOut(new PrintStream(html, true, StandardCharsets.UTF_8));
        try {
            kafka.server.KafkaConfig.main(new String[0]);
        } finally {
            System.setOut(stdout);
        }
        Set<String> names = new TreeSet<>();
        Matcher m = DOCUMENTED.matcher(html.toString(StandardCharsets.UTF_8));
        while (m.find()) {
            names.add(m.group(1));
        }
        return names;
    }

    private static String json(Set<String> names) {
        return names.stream().map(n -> "\"" + n + "\"").collect(Collectors.joining(", ", "[", "]"));
    }

    /** kafka-clients' release, from the file its jar carries (AppInfoParser, which reads it, moved in 4.4). */
    private static String clientsVersion() {
        java.util.Properties props = new java.util.Properties();
        try (java.io.InputStream in = org.apache.kafka.clients.producer.ProducerConfig.class
                .getResourceAsStream("/kafka/kafka-version.properties")) {
            props.load(in);
        } catch (java.io.IOException | NullPointerException e) {
            return "unknown";
        }
        return props.getProperty("version", "unknown");
    }
}
