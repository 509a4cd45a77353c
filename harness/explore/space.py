"""An exploration's space: a base scenario and what may vary, and the trials drawn from it.

A trial is the base scenario with settings changed the way ``kchaos run --set`` changes them, and a drawn list
of faults; so every trial is an ordinary scenario file, run and judged as any other, and a finding's scenario
can be copied into scenarios/ as it is. Draws come from the exploration's seed and the trial's number alone:
the same space, seed and number give the same trial.
"""

from __future__ import annotations

import copy
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from catalogue.anomalies import ANOMALY_INFO
from catalogue.exits import HarnessError
from faults.base import FaultError
from faults.registry import FAULTS
from faults.targets import TARGETS
from harness.scenario import Scenario, Strict, apply_override, one_line, read_mapping

Scalar = Union[bool, int, float, str, None]
Move = Literal["faults", "nesting", "durations", "options", "run", "load", "settings"]
MOVES: tuple[str, ...] = get_args(Move)


class Between(Strict):
    """A number drawn uniformly from [min, max]: whole numbers when both bounds are whole."""

    min: float
    max: float

    @model_validator(mode="after")
    def _ordered(self) -> "Between":
        if self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        return self

    @property
    def whole(self) -> bool:
        return float(self.min).is_integer() and float(self.max).is_integer()

    def draw(self, rng: random.Random) -> float | int:
        if self.whole:
            return rng.randint(int(self.min), int(self.max))
        return round(rng.uniform(self.min, self.max), 2)

    def ends(self) -> list[float | int]:
        return [int(v) if self.whole else v for v in (self.min, self.max)]


Choice = Union[Between, list[Union[Scalar, dict[str, Scalar]]]]


def draw(choice: Choice, rng: random.Random) -> Any:
    """One value of a choice: one of a list's items, or a number between a range's ends."""
    return choice.draw(rng) if isinstance(choice, Between) else rng.choice(choice)


def values(choice: Choice) -> list[Any]:
    """What a choice can give, as far as a check needs: a list's items, a range's two ends."""
    return choice.ends() if isinstance(choice, Between) else list(choice)


class FaultChoice(Strict):
    """A fault kind a trial may draw, with the targets and option values it may draw for it."""

    kind: str = Field(description="a fault kind")
    targets: list[str] = Field([], description="the targets drawn from; empty: the kind's default target")
    options: dict[str, Choice] = Field({}, description="option -> a list of values or {min, max}; the others "
                                       "keep their defaults")
    then: list[str] = Field([], description="kinds that may be nested in it (target same)")
    weight: float = Field(1.0, gt=0, description="how often it is drawn, relative to the others")

    @model_validator(mode="after")
    def _known(self) -> "FaultChoice":
        if self.kind not in FAULTS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {', '.join(FAULTS)}")
        fault = FAULTS[self.kind]
        for target in self.targets:
            if target not in TARGETS:
                raise ValueError(f"unknown target {target!r}")
            try:
                fault.check_target(target)
            except FaultError as e:
                raise ValueError(str(e)) from None
        for name, choice in self.options.items():
            for value in values(choice):
                try:
                    fault.check_options({name: value})
                except FaultError as e:
                    raise ValueError(str(e)) from None
        for inner in self.then:
            if inner not in FAULTS:
                raise ValueError(f"then: unknown fault kind {inner!r}")
        return self


class FaultSpace(Strict):
    """How many faults a trial has and how each is timed."""

    count: Between = Field(Between(min=1, max=3), description="how many faults a trial draws")
    duration_s: Between = Field(Between(min=2, max=10), description="each fault's duration_s")
    interval_s: list[float] = Field([8, 15], min_length=2, max_length=2,
                                    description="each fault's interval_s, as written in the trial")
    nest: float = Field(0.3, ge=0, le=1, description="the chance a fault with `then` kinds gets one nested")
    kinds: list[FaultChoice] = Field(min_length=1, description="the fault kinds a trial draws from")


class ShrinkSpace(Strict):
    """How a finding is shrunk."""

    runs: int = Field(3, ge=1, description="how many times a candidate is run before it is given up (it is kept "
                                           "as soon as one run shows the anomaly)")
    confirm: int = Field(3, ge=1, description="how many times the smallest scenario is run to measure its rate")
    moves: list[Move] = Field(list(MOVES), description="which simplifications are tried, in this order")
    min_duration_s: float = Field(20, gt=0, description="the shortest run length it tries")


class Space(Strict):
    """An exploration's space (``kchaos explore SPACE.yaml``)."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,100}$", description="names the trials' scenarios")
    description: str = ""
    base: str = Field(description="the base scenario, relative to the space file (or to the working folder)")
    hunt: list[str] = Field([], description="anomalies that count as findings even where the settings allow them "
                            "(a space whose answer is known)")
    settings: dict[str, Choice] = Field({}, description="a scenario key as --set writes it -> a list of values "
                                        "or {min, max}; or a label -> a list of mappings of such keys to values, "
                                        "each drawn whole (settings that go together: a client and its release)")
    faults: FaultSpace
    shrink: ShrinkSpace = ShrinkSpace()
    retries: int = Field(1, ge=0, description="how many more times a trial that was not judged is run")

    @field_validator("hunt")
    @classmethod
    def _anomalies(cls, hunt: list[str]) -> list[str]:
        unknown = [a for a in hunt if a not in ANOMALY_INFO]
        if unknown:
            raise ValueError(f"unknown anomaly {', '.join(unknown)}")
        return hunt


@dataclass(frozen=True)
class Trial:
    """One drawn scenario: the base with ``settings`` (key -> value, as --set) and ``faults`` (scenario entries)."""

    settings: dict[str, Any]
    faults: list[dict[str, Any]]
    seed: int
    steps: list[str] = field(default_factory=list)  # what the shrinker did to it, in order

    def overrides(self) -> list[str]:
        return [f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
                for key, value in self.settings.items()]


@dataclass
class Explorable:
    """A space read and checked, with its base scenario."""

    space: Space
    path: Path
    base_path: Path
    base_raw: dict[str, Any]
    base: Scenario

    def scenario(self, trial: Trial, name: str) -> dict[str, Any]:
        """The trial as a raw scenario (what its file holds): the base, its settings, its faults; no
        expectations (the explorer judges by the settings' promises)."""
        raw = copy.deepcopy(self.base_raw)
        for assignment in trial.overrides():
            apply_override(raw, assignment)
        raw.update(name=name, seed=trial.seed, nightly=False, faults=[dict(f) for f in trial.faults], expect=None)
        raw.pop("description", None)
        return raw

    def validate(self, trial: Trial, name: str) -> Scenario:
        """The trial as ``kchaos run`` would load it; HarnessError (one line) when it cannot be run."""
        try:
            return Scenario.model_validate(self.scenario(trial, name))
        except ValidationError as e:
            raise HarnessError(one_line(e)) from None

    def draw(self, seed: int, number: int, attempt: int = 0) -> Trial:
        """Trial ``number`` of an exploration seeded ``seed`` (``attempt``: drawn again after a refused draw)."""
        rng = random.Random(f"{self.space.name}/{seed}/{number}/{attempt}")
        settings: dict[str, Any] = {}
        for key, choice in self.space.settings.items():
            value = draw(choice, rng)
            settings.update(value if isinstance(value, dict) else {key: value})
        fs = self.space.faults
        faults = [self._fault(rng, rng.choices(fs.kinds, weights=[k.weight for k in fs.kinds])[0])
                  for _ in range(int(fs.count.draw(rng)))]
        return Trial(settings, faults, rng.randrange(1 << 31))

    def _fault(self, rng: random.Random, choice: FaultChoice) -> dict[str, Any]:
        fs = self.space.faults
        duration = float(fs.duration_s.draw(rng))
        entry: dict[str, Any] = {"kind": choice.kind, "duration_s": duration, "interval_s": list(fs.interval_s)}
        if choice.targets:
            entry["target"] = rng.choice(choice.targets)
        options = {name: draw(c, rng) for name, c in choice.options.items()}
        if options:
            entry["options"] = options
        if choice.then and duration >= 2 and rng.random() < fs.nest:
            after = round(rng.uniform(0, duration / 3), 1)
            entry["then"] = {"kind": rng.choice(choice.then), "target": "same", "after_s": after,
                             "duration_s": round(rng.uniform(1, duration - after), 1)}
        return entry


def load_space(path: Path) -> Explorable:
    """Read a space file and its base scenario (HarnessError, one line, on any problem). A setting is tried on
    the base alone: a key none of whose values it takes is refused here; a draw whose values cannot go together
    (ZooKeeper on Kafka 4) is refused when drawn, and the explorer draws again."""
    raw = read_mapping(path, "space")
    try:
        space = Space.model_validate(raw)
    except ValidationError as e:
        raise HarnessError(f"{path}: {one_line(e)}") from None
    base_path = next((Path(os.path.normpath(p)) for p in (path.parent / space.base, Path(space.base)) if p.is_file()),
                     None)
    if base_path is None:
        raise HarnessError(f"{path}: base: no scenario file {space.base} (beside the space file or here)")
    base_raw = read_mapping(base_path)
    base_raw.setdefault("name", base_path.stem)
    try:
        base = Scenario.model_validate(base_raw)
    except ValidationError as e:
        raise HarnessError(f"{base_path}: {one_line(e)}") from None
    explorable = Explorable(space, path, base_path, base_raw, base)
    for key, choice in space.settings.items():  # a key the base cannot take with any of its values is a typo
        problems = []
        for value in values(choice):
            try:
                alone = value if isinstance(value, dict) else {key: value}
                explorable.validate(Trial(alone, list(base_raw.get("faults") or []), 0), space.name)
                break
            except HarnessError as e:
                problems.append(str(e))
        else:
            raise HarnessError(f"{path}: settings.{key}: no value runs on the base scenario ({problems[0]})")
    return explorable
