"""The model layer: what the model is (spec, build, declarations, facts) and how to call it."""
