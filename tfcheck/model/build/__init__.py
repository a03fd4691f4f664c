"""Stage 1 of the model layer, **build**: from what the user named to a built model.

Runs first, once per model, before any fact is settled and before any forward: the spec is imported (under the
import time limit), the constructor's arguments are filled (hyper-parameter names, a config, the run's device)
and shrunk to small sizes with their invariants kept, the build's size is estimated on the meta device and
refused when it would not fit, and the model is built from a fixed seed. What comes out is a ``Loaded``: the
model and how it came to be (filled, shrunk, the user's own arguments).

Also here, because building is where tfcheck first calls the user's code: the one guard around every call into
it (``user_code``), the lines that registered each submodule (``construction_sites``), and the memory a run may
use. Nothing here reads a fact or runs a forward.
"""
