"""The probes: perturbing and measuring forwards of the model under test, over the recorder core in
``tfcheck.recording``."""
