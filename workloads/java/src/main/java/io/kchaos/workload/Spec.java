package io.kchaos.workload;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The JSON spec a process gets as its second argument (the same object the Python processes get: each
 * ClientProcess.spec() plus name, origin_ns, verbose). Thin accessors over Jackson's tree, so a missing field is
 * a one-line error naming it rather than a NullPointerException.
 */
public final class Spec {
    static final ObjectMapper JSON = new ObjectMapper();

    public final JsonNode root;

    Spec(JsonNode root) {
        this.root = root;
    }

    static Spec parse(String json) {
        try {
            JsonNode root = JSON.readTree(json);
            if (root == null || !root.isObject()) {
                throw new BadInput("the spec must be a JSON object");
            }
            return new Spec(root);
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new BadInput("the spec is not JSON: " + e.getOriginalMessage());
        }
    }

    /** A spec that cannot be run: a one-line message on stderr, exit 2 (the harness's bug, not a fault). */
    public static final class BadInput extends RuntimeException {
        public BadInput(String message) {
            super(message);
        }
    }

    public JsonNode node(String field) {
        JsonNode n = root.get(field);
        if (n == null) {
            throw new BadInput("the spec has no " + field);
        }
        return n;
    }

    /** The field, or null when it is absent or JSON null. */
    public JsonNode optional(String field) {
        JsonNode n = root.get(field);
        return n == null || n.isNull() ? null : n;
    }

    public String str(String field) {
        return node(field).asText();
    }

    public long integer(String field) {
        JsonNode n = node(field);
        if (!n.canConvertToLong()) {
            throw new BadInput("the spec's " + field + " must be an integer, not " + n);
        }
        return n.asLong();
    }

    public double number(String field) {
        JsonNode n = node(field);
        if (!n.isNumber()) {
            throw new BadInput("the spec's " + field + " must be a number, not " + n);
        }
        return n.asDouble();
    }

    /** A number, or null when absent or JSON null (e.g. rate: null means as fast as the client takes them). */
    public Double optionalNumber(String field) {
        JsonNode n = optional(field);
        return n == null ? null : n.asDouble();
    }

    public boolean flag(String field) {
        JsonNode n = optional(field);
        return n != null && n.asBoolean();
    }

    public String name() {
        return str("name");
    }

    /** The scenario's client settings ({@code config}), every value as the string Kafka's ConfigDef parses. */
    public Map<String, Object> config() {
        JsonNode n = optional("config");
        return n == null ? new LinkedHashMap<>() : settings(n);
    }

    /** A JSON object of client settings as Kafka properties: scalars as strings, lists joined by commas. */
    public static Map<String, Object> settings(JsonNode object) {
        if (!object.isObject()) {
            throw new BadInput("client settings must be a JSON object, not " + object);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        Iterator<Map.Entry<String, JsonNode>> fields = object.fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> e = fields.next();
            out.put(e.getKey(), setting(e.getValue()));
        }
        return out;
    }

    private static String setting(JsonNode value) {
        if (value.isArray()) {
            StringBuilder b = new StringBuilder();
            for (JsonNode item : value) {
                if (b.length() > 0) {
                    b.append(',');
                }
                b.append(item.asText());
            }
            return b.toString();
        }
        return value.isNull() ? null : value.asText();
    }
}
