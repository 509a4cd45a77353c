"""The setting names one Kafka version's broker, topics and Java client accept, read from its own jars.

Kafka silently ignores an unknown name in server.properties, so a typo would
quietly change an experiment. ``images/ConfigNames.java`` asks the version's
KafkaConfig and LogConfig (no broker, no Docker) and the answer is cached as
JSON under .cache/kafka/<version>/; ``python -m clusters.image`` (make setup)
fills the cache, and a missing entry is built on first use.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from clusters.errors import ClusterError
from clusters.image import CACHE_DIR, IMAGES_DIR, kafka_jars, recipe_digest

EXTRACTOR = IMAGES_DIR / "ConfigNames.java"
NAMES_DIR = CACHE_DIR / "kafka"
# server.properties settings scoped to one listener: listener.name.<listener>[.<sasl mechanism>].<setting>
LISTENER_PREFIX = "listener.name."


@dataclass(frozen=True)
class ConfigNames:
    kafka_version: str
    broker: frozenset[str]
    topic: frozenset[str]
    producer: frozenset[str]   # the version's Java client (kafka-clients)
    consumer: frozenset[str]

    def broker_accepts(self, name: str) -> bool:
        """A KafkaConfig name, or one scoped to a listener (``listener.name.internal.ssl.keystore.location``)."""
        if name in self.broker:
            return True
        if not name.startswith(LISTENER_PREFIX):
            return False
        scoped = name.removeprefix(LISTENER_PREFIX).split(".", 1)[-1]
        return scoped in self.broker or scoped.split(".", 1)[-1] in self.broker


def names_file(version: str) -> Path:
    """Where a version's names are cached; a new extractor or pom gives a new file."""
    recipe = recipe_digest(EXTRACTOR.read_bytes(), (IMAGES_DIR / "pom.xml").read_bytes())
    return NAMES_DIR / version / f"config-names-{recipe}.json"


@lru_cache(maxsize=None)
def config_names(version: str) -> ConfigNames:
    """The broker and topic setting names of Kafka ``version``, extracted once and cached on disk."""
    path = names_file(version)
    if not path.exists():
        _extract(version, path)
    data = json.loads(path.read_text())
    return ConfigNames(version, *(frozenset(data[kind]) for kind in ("broker", "topic", "producer", "consumer")))


def _extract(version: str, path: Path) -> None:
    """Run the extractor on the version's jars (resolved by Maven if missing) and write the JSON atomically."""
    if shutil.which("java") is None:
        raise ClusterError(f"cannot read Kafka {version}'s setting names: java is not installed (run `make setup`)")
    libs = kafka_jars(version)
    result = subprocess.run(["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", f"{libs}/*", str(EXTRACTOR)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise ClusterError(f"cannot read Kafka {version}'s setting names from its jars "
                           f"(exit {result.returncode}): {tail}")
    data = json.loads(result.stdout)
    if data["kafka_version"] != version:
        raise ClusterError(f"the jars resolved for Kafka {version} say they are {data['kafka_version']}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as out:
        json.dump(data, out)
    os.replace(out.name, path)

