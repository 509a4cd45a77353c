"""Forensics: what the Kafka nodes themselves logged, on the run's time line (issue #20).

A stage of its own between the cluster and the checker: it reads only what the cluster stage left in the run
directory (logs/<node>.log, copied out at teardown) and scenario.yaml's wall-clock start, and writes
history/broker-events.jsonl through rundir, so it runs offline on any past run (``kchaos forensics RUN``).
It is not part of clusters/ (which drives Docker: this must import without it) nor of checkers/ (which judges
the client histories; this adds to them): ``nodelog`` reads log lines and their times, ``templates`` knows
Kafka's message formats (3.9.2 and 4.3.1, ZooKeeper and KRaft), ``parse`` turns one node's lines into events,
``command`` builds the file for a run.
"""
