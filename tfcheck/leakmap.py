"""The public path ``tfcheck.leakmap``: leak maps as data live in ``tfcheck.report.leak_map``, the probes the mask
checks share in ``tfcheck.probe.layer_capture`` and the views in ``tfcheck.ui.leakmap``; their public names are
re-exported here so code and printed lines written against this path keep working."""
from tfcheck.probe.layer_capture import captured_layers, first_tensor, layer_modules, perturbed_embedding  # noqa: F401
from tfcheck.report.leak_map import GLYPHS, LEGEND, LeakMap, evidence_of  # noqa: F401
from tfcheck.ui.leakmap import leak_map_table, save_image, save_images  # noqa: F401

__all__ = [
    'captured_layers', 'evidence_of', 'first_tensor', 'GLYPHS', 'layer_modules', 'LeakMap', 'leak_map_table',
    'LEGEND', 'perturbed_embedding', 'save_image', 'save_images',
]
