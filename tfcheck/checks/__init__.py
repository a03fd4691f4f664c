"""The battery, one subpackage per family (shape, mask, flow, attention, numerics, training). Importing this
package imports every module in it, subpackages included, and so registers every check.

A new check is a new module in its family's folder with one ``@check(...)`` function; nothing else needs editing.
"""
import importlib
import pkgutil

for _module in sorted(pkgutil.walk_packages(__path__, prefix=f"{__name__}."), key=lambda m: m.name):
    importlib.import_module(_module.name)
