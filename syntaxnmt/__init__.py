"""syntaxnmt: attention-based NMT with linguistic structure as a first-class input of attention.

The public Python API (:mod:`syntaxnmt.api`), imported on first use so that ``import syntaxnmt``
stays cheap (the command line imports the package too)::

    import syntaxnmt
    translator = syntaxnmt.Translator.from_checkpoint("runs/x/best.pt")
    results = translator.translate(["the dog sees a cat ."], beam=5, nbest=2, alignments=True, attention=True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Attention", "Candidate", "Translation", "Translator", "UserError", "__version__"]

if TYPE_CHECKING:
    from syntaxnmt.api import Attention, Candidate, Translation, Translator
    from syntaxnmt.errors import UserError


def __getattr__(name: str) -> Any:
    """``syntaxnmt.Translator`` and the other public names, imported when first asked for (PEP 562)."""
    if name == "UserError":
        from syntaxnmt.errors import UserError  # deferred: keeps `import syntaxnmt` cheap (torch loads with the API)

        return UserError
    if name in ("Attention", "Candidate", "Translation", "Translator"):
        from syntaxnmt import api  # deferred: keeps `import syntaxnmt` cheap (torch loads with the API)

        return getattr(api, name)
    raise AttributeError(f"module 'syntaxnmt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
