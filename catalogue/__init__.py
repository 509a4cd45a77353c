"""The one catalogue every stage derives from: anomalies, fault kinds, history fields, exit codes and what
each client's producer runs with by default.

It sits at the bottom of the import graph and imports nothing of kchaos, so
the checkers, forensics, the verdict, the report, the matrix and JUnit can all
read the same entry (tests/test_catalogue.py fails when an entry lacks a rule
in either checker or a fact a stage needs).
"""
