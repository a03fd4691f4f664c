"""The public path ``tfcheck.leakmap``: the module lives in ``tfcheck.ui.leakmap``; its public names are
re-exported here so code and printed lines written against this path keep working."""
from tfcheck.ui.leakmap import (  # noqa: F401
    GLYPHS,
    LEGEND,
    LeakMap,
    captured_layers,
    evidence_of,
    first_tensor,
    layer_modules,
    perturbed_embedding,
    save_image,
    save_images,
)

__all__ = [
    'captured_layers', 'evidence_of', 'first_tensor', 'GLYPHS', 'layer_modules', 'LeakMap', 'LEGEND',
    'perturbed_embedding', 'save_image', 'save_images',
]
