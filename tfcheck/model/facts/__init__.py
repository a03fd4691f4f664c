"""Stage 2 of the model layer, **facts**: what tfcheck knows about a built model, without running it.

Runs after the build and before the trial: the declarations (command line, pyproject, ``__tfcheck__``) are
parsed and merged strongest first, then every fact not declared is inferred from the config, the forward's
signature and the module tree (``inference``: kind, mask convention, the call plan, which argument is the
decoder input, the label convention), each with the source the report shows. Never from the behaviour a check
measures. Pytest collection stops after this stage: its items need no forward.
"""
