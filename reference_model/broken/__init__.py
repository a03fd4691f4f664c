"""A gallery of deliberately broken Transformers, ONE defect each, grouped by the family of check that
catches them (one module per family). Each variant's ``__tfcheck_expect__`` names the check that must
catch it and the troubleshooting row that must explain it; ``VARIANTS`` lists them all.

    pytest --tfcheck reference_model.broken:LMWithoutHead
"""
import importlib
import inspect
import pkgutil

VARIANTS = []
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    for _name, _value in vars(_module).items():
        if inspect.isclass(_value) and "__tfcheck_expect__" in vars(_value) and not _name.startswith("_"):
            globals()[_name] = _value
            VARIANTS.append(_value)
VARIANTS = tuple(VARIANTS)
__all__ = [v.__name__ for v in VARIANTS] + ["VARIANTS"]
