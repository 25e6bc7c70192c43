"""Design -> PyTorch source: `generate(design)` writes one module needing only torch."""

from .generate import generate

__all__ = ["generate"]
