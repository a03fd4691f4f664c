"""The pytest plugin's parts; ``tfcheck.plugin`` (the ``pytest11`` entry point) wires them to pytest's hooks.

settings: the options and ini keys, read once (command line over ini); anchors: which file a model's items
hang under, so that their ids can be pasted back to pytest; nodes: the collectors and items; verdicts: a
check's result as a pytest outcome; failure_repr: how a failed item is shown for each ``--tb`` style;
session: the hooks that run only when tfcheck items exist; fixture: ``tfcheck_run`` for users' own tests.
None of them imports torch at import time.
"""
