"""The recorder core: what one forward (and backward) of a model did, op by op and module by module.

Below the model layer: the model's trial reads recordings, and every probe above records. Nothing here knows
about facts, checks or reports.
"""
