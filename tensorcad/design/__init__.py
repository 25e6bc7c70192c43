"""The design language: model, loading, the catalog of kinds, expressions."""

from .catalog import KINDS, ROLES
from .load import load, preset_names, read
from .model import Attention, Design, Input, Node, Wire
from .printer import show
from .resolve import resolve

__all__ = ["KINDS", "ROLES", "Attention", "Design", "Input", "Node", "Wire",
           "load", "preset_names", "read", "resolve", "show"]
