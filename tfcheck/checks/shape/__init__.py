"""Shape checks: the forward runs and returns the documented shapes, with a residual stream."""
