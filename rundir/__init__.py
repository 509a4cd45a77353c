"""The run directory: kchaos's contract with its users' tools (docs/run-directory.md).

Every stage that writes or reads a run directory goes through this package:
``layout`` names every path and checks what is present, ``lines`` holds the
JSON-lines rules of the history files, ``records`` makes the lines the
harness appends to them (catalogue.history's field order), ``documents`` reads
and writes scenario.yaml, results.json (composed from its parts in one place)
and the events the verdict needs. ``versions``
names the kchaos that wrote results.json and ``phases`` times a run's phases
(the verdict times its own), so every stage above may use them.
"""
