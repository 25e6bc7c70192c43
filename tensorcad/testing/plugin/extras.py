"""What each of the plugin's features needs beyond pytest, and the one line that says so when it is missing.

The plugin is loaded into every pytest session of an environment that installs tensorcad
(the ``pytest11`` entry point), most of which never use it: its start-up imports pytest,
the standard library and tensorcad's own lazy faces, nothing else. A feature imports what
it needs when it is used; where that is not installed, the item using it fails with one
line naming the extra to install (``pip install 'tensorcad[pytest]'``), never an
INTERNALERROR and never in a session that does not use it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# module -> (what needs it, the extra that installs it)
NEEDS = {
    "syrupy": ("goldens", "pytest"),
    "torch": ("models and their certificates", "pytest"),
    "transformers": ("Hugging Face models", "pytest"),
}


class MissingExtra(ImportError):
    """A feature of the plugin used without what it needs installed; its message is the one line to print."""


def missing_line(module: str) -> str:
    feature, extra = NEEDS[module]
    return f"tensorcad: {feature} need {module}, which is not installed: pip install 'tensorcad[{extra}]'"


def require(module: str) -> ModuleType:
    """`module` imported, or `MissingExtra` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.split(".")[0] == module:
            raise MissingExtra(missing_line(module)) from None
        raise


def missing_extra(error: BaseException) -> str | None:
    """The one line for an error that is a missing optional dependency of the plugin's, else None."""
    if isinstance(error, MissingExtra):
        return str(error)
    if isinstance(error, ModuleNotFoundError) and error.name is not None:
        top = error.name.split(".")[0]
        if top in NEEDS:
            return missing_line(top)
    return None


def missing_for(features_used: bool) -> list[str]:
    """The line for each extra a session that uses the plugin's features lacks (found, not imported)."""
    import importlib.util

    if not features_used:
        return []
    return [missing_line(module) for module in ("torch", "syrupy") if importlib.util.find_spec(module) is None]
