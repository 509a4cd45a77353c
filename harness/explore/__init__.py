"""``kchaos explore``: draw trials from a space of faults and settings, run each as an ordinary run, and shrink
every finding to the smallest scenario that still shows it.

``space.py`` reads a space file and draws trials (a base scenario, settings as ``--set`` assignments, a drawn
fault list); ``shrink.py`` is the shrinker, pure logic over a runner; ``explorer.py`` runs trials within a
budget and writes the exploration's folder (verdicts/exploration.py judges each trial and draws the page).
"""
