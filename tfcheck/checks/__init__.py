"""The battery. Importing this package imports every module in it, and so registers every check.

A new check is a new module here with one ``@check(...)`` function; nothing else needs editing.
"""
import importlib
import pkgutil

for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_module.name}")
