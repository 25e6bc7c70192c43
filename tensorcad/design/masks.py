"""Mask facts: what an attention's mask reads and what it is, answered once.

Codegen (to name a mask), the analysis (to count it exactly), the rules, the
editor and the runtime's checks all ask the same questions of an attention:
does its mask read documents; is it exactly ``doc(b, q) == doc(b, kv)``; which
of its parts are causality and a window; which roles can the engine make up to
measure it. They ask here, over the parsed form (``design.expr``), never over text.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TensorcadError
from .expr.nodes import Binary, Compare, Const, Expr, Read, Var, reads
from .model import Attention

# FlexAttention's default block (create_block_mask's BLOCK_SIZE): the block the engine
# counts in, the generated module builds its block masks with, and the checks compare at.
BLOCK = 128

# The roles whose values the engine can make up for a packing (a row's documents and
# the positions restarting in each); a mask reading anything else cannot be measured.
MADE_UP_ROLES = ("documents", "positions")


def conjuncts(expr: Expr) -> list[Expr]:
    """The parts ANDed together in ``expr`` (``a & b & c`` -> [a, b, c])."""
    if isinstance(expr, Binary) and expr.op == "&":
        return conjuncts(expr.left) + conjuncts(expr.right)
    return [expr]


def is_causal(expr: Expr) -> bool:
    """Whether ``expr`` is ``q >= kv`` (or ``kv <= q``)."""
    q, kv = Var("q"), Var("kv")
    return isinstance(expr, Compare) and (
        (expr.op == ">=" and expr.left == q and expr.right == kv)
        or (expr.op == "<=" and expr.left == kv and expr.right == q))


def keeps_only_the_past(keep: Expr) -> bool:
    """Whether ``q >= kv`` is one of the conjuncts (so no later key is ever kept)."""
    return any(is_causal(part) for part in conjuncts(keep))


def is_same_document(expr: Expr, role_of: dict[str, str | None]) -> bool:
    """Whether ``expr`` is exactly ``doc(b, q) == doc(b, kv)`` over a port of role documents."""
    if not (isinstance(expr, Compare) and expr.op == "=="):
        return False
    sides = (expr.left, expr.right)
    if not all(isinstance(s, Read) and not s.table and len(s.index) == 2 for s in sides):
        return False
    left, right = sides
    if left.port != right.port or role_of.get(left.port) != "documents":
        return False
    indices = {tuple(i.name if isinstance(i, Var) else None for i in s.index) for s in sides}
    return indices == {("b", "q"), ("b", "kv")}


def roles_read(attention: Attention) -> dict[str, str | None]:
    """Port -> the role of the input wired to it, for every tensor port the kept set reads."""
    read = reads(attention.keep) if attention.keep is not None else frozenset()
    out: dict[str, str | None] = {}
    for port in sorted(read):
        wire = attention.tensors.get(port)
        if wire is not None or port not in attention.tables:
            out[port] = wire.role if wire is not None else None
    return out


def reads_documents(attention: Attention) -> bool:
    """Whether what the attention keeps depends on a documents input."""
    return "documents" in roles_read(attention).values()


def made_up_roles(attention: Attention, who: str = "engine") -> dict[str, str]:
    """Port -> role for each tensor the mask reads, all of which ``who`` must be able to make up.

    Only documents and positions can be made up; a port wired from token ids is an
    input-roles error, which the analysis (and the editor's preview) refuses rather than invent.
    """
    roles: dict[str, str] = {}
    for port, role in roles_read(attention).items():
        if role not in MADE_UP_ROLES:
            raise TensorcadError(
                attention.path,
                f"the mask reads port {port!r}, wired from an input of role {role!r}; the "
                f"{who} can only make up {' or '.join(MADE_UP_ROLES)} to measure it")
        roles[port] = role
    return roles


@dataclass(frozen=True)
class MaskFacts:
    """What one attention keeps, in the terms every layer asks about."""

    causal: bool  # q >= kv is part of what it keeps
    window: int | None  # keys within this distance (0 <= q - kv < w causal, |q - kv| < w otherwise)
    same_document: bool  # its own mask is exactly doc(b, q) == doc(b, kv)
    reads: dict[str, str | None]  # port -> role, for each tensor the kept set reads
    keeps_all: bool  # no causality, no window, no mask: every score kept

    @property
    def reads_documents(self) -> bool:
        return "documents" in self.reads.values()

    @property
    def document_causal(self) -> bool:
        """Exactly causal attention within each document: the mask the closed forms describe."""
        return self.causal and self.window is None and self.same_document


def facts(attention: Attention) -> MaskFacts:
    """The mask facts of ``attention``."""
    roles = {port: wire.role for port, wire in attention.tensors.items()}
    same = attention.mask is not None and is_same_document(attention.mask, roles)
    return MaskFacts(causal=attention.causal, window=attention.window, same_document=same,
                     reads=roles_read(attention), keeps_all=attention.keep is None)


def countable(keep: Expr, role_of: dict[str, str | None]) -> tuple[bool, bool] | None:
    """(causal, same document) when the kept set is only those parts, else None."""
    causal = same = False
    for part in conjuncts(keep):
        if is_causal(part):
            causal = True
        elif is_same_document(part, role_of):
            same = True
        elif not (isinstance(part, Const) and part.value is True):
            return None
    return causal, same
