"""The debugging tools above the engine: ``trace_shapes``, ``watch``, the minimal-example search and ``replay``.

Each runs a model through the engine's guard (the model left as it was found) and returns data; the views in
``tfcheck.ui`` show it.
"""
