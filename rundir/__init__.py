"""The run directory: kchaos's contract with its users' tools (DESIGN.md, "The run directory").

Every stage that writes or reads a run directory goes through this package:
``layout`` names every path and checks what is present, ``lines`` holds the
JSON-lines rules of the history files, ``documents`` reads and writes
scenario.yaml, results.json and the events the verdict needs.
"""
