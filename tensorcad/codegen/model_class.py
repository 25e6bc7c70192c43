"""The generated `Model`: its construction, its forms, its weights, and a forward read top to bottom.

`Model(config=CONFIG, form="flex")` holds each top-level node as an attribute,
`form` switches every attention between FlexAttention and plain matmuls, and
`forward(ids, documents=None, positions=None)` takes exactly the inputs the
design has, refusing one it has no input for with what to do instead. The half
of the generator that writes it; the classes inside it are `generate`'s.
"""

from __future__ import annotations

import json

from ..design import expr as E
from ..design.mixers import DOCUMENTS_PORT, is_stateful, resets
from ..design.model import Node
from ..errors import TensorcadError
from . import hf_weights, layout
from .modules import assign_call
from .names import title_text

ROLE_ARGUMENT = {"tokens": "ids", "documents": "documents", "positions": "positions"}
# What to do instead, for an argument the design has no input for (passing it would be ignored otherwise).
_NO_INPUT = {
    "documents": "no attention reads them; pass documents=None",
    "positions": "it counts 0..T-1 itself; pass positions=None",
}


def used_ports(node: Node) -> list[str]:
    """The ports (documents, positions, tables) this node's subtree reads, sorted."""
    if node.kind == "sdpa":
        a = node.attention
        found = set()
        for e in (a.keep, a.score):
            if e is not None:
                found |= E.reads(e)
        return sorted(found)
    if node.kind in ("rope", "pos_embedding"):
        return ["pos"] if node.wire("pos") is not None else []
    if is_stateful(node):  # the documents its state resets at
        return [DOCUMENTS_PORT] if resets(node) else []
    found = set()
    for child in node.children:
        found |= set(used_ports(child))
    return sorted(found)


class ModelWriter:
    """Writes `Model`; the generator it is part of supplies the names, config, classes and masks."""

    def top_values(self, node: Node) -> list[str]:
        """Keyword arguments handing a top-level node the ports it reads."""
        out = []
        for port in used_ports(node):
            wire = node.wire(port)
            if wire.from_input:
                value = ROLE_ARGUMENT[wire.role]
            else:
                value = f"self.{self.names(wire.source)}"
            out.append(f"{self.ports(port)}={value}")
        return out

    def model(self) -> str:
        d = self.design
        attr = self.names
        init: list[str] = []
        tables: list[str] = []
        for node in d.nodes:
            name = attr(node.id)
            if node.kind == "table":
                shape = self.config(node.id, "shape")
                init += assign_call(layout.BODY, f"self.{name}", "nn.Parameter", [f"torch.empty({shape})"])
                tables.append(name)
            elif node.kind == "stack" and node.params["layers"] is not None:
                init += self._hybrid_stack(node)
            elif node.kind == "stack":
                # a block whose numbers differ from the first's (Gemma 3's rope bases) reads fields of its own
                self.turn_ports = used_ports(node)  # each block takes what any block taken in turn reads
                built = [self.construct(child, self.config.variant_owner(node.id, i))
                         for i, child in enumerate(node.children)]
                self.turn_ports = []
                n_layer = self.config(node.id, "n_layer")
                if len(built) == 1:
                    fn, args = built[0]
                    inner = f"[{fn}({', '.join(args)}) for _ in range({n_layer})]"
                else:  # blocks taken in turn (alternating windows): layer i is the (i mod n)th
                    kinds = ", ".join(fn for fn, _ in built)
                    args = built[0][1]
                    inner = f"[({kinds})[i % {len(built)}]({', '.join(args)}) for i in range({n_layer})]"
                listed = assign_call(layout.BODY, f"self.{name}", "nn.ModuleList", [inner])
                if len(built) > 1 and max(map(len, listed)) > layout.WIDTH:  # the comprehension split, as black does
                    pad = layout.BODY + "    "
                    listed = [f"{layout.BODY}self.{name} = nn.ModuleList(", f"{pad}[",
                              f"{pad}    ({kinds})[i % {len(built)}]({', '.join(args)})",
                              f"{pad}    for i in range({n_layer})", f"{pad}],", f"{layout.BODY})"]
                init += listed
            else:
                fn, args = self.construct(node, node.id)
                init += assign_call(layout.BODY, f"self.{name}", fn, args)
                if node.kind == "linear" and node.params["tie"] is not None:
                    init.append(f"        self.{name}.weight = self.{attr(node.params['tie'])}.weight")
        roles = self._roles_read()
        # The public contract: every generated model takes the same three arguments;
        # one the design has no input for is refused rather than silently ignored.
        signature = ["self", "ids", "documents=None", "positions=None"]
        lines = [
            "class Model(nn.Module):",
            f'    """{title_text(d.name)}: {self._takes(roles)} -> logits (B, T, V)."""',
            "",
            "    def __init__(self, config=CONFIG, form=\"flex\"):",
            "        super().__init__()",
            "        self.config = config",
            *init,
            "        self.apply(self._init_weights)",
            *(f"        torch.nn.init.normal_(self.{t}, mean=0.0, std=0.02)" for t in tables),
            "        self.form = form",
            "",
            "    @property",
            "    def form(self):",
            '        """The form: "flex" (FlexAttention) or "eager" (plain matmuls)."""',
            "        return self._form",
            "",
            "    @form.setter",
            "    def form(self, form):",
            '        if form not in ("flex", "eager"):',
            "            raise ValueError(f\"form must be 'flex' or 'eager', not {form!r}\")",
            "        self._form = form",
        ]
        if self.attention_classes:
            kinds = ", ".join(self.attention_classes) + ("," if len(self.attention_classes) == 1 else "")
            lines += [
                "        for module in self.modules():",
                f"            if isinstance(module, ({kinds})):",
                "                module.form = form",
            ]
            # The contract tensorcad's runtime reads, as attributes rather than module globals.
            lines[3:3] = [
                "    # What tensorcad's runtime reads of this module: its masks, a recorder of",
                "    # attend calls, a context-parallel rank's block mask, which pieces",
                "    # torch.compile is tried on, the paths that ran.",
                "    masks = MASKS",
                "    recording_attend = staticmethod(recording_attend)",
                "    cp_block_mask = staticmethod(cp_block_mask)",
                "    compile_pieces = COMPILE",
                "    runtime_paths = RUNTIME_PATHS",
                "",
            ]
        lines += [
            "",
            "    def _init_weights(self, module):",
            "        # nanoGPT's init: weights normal(0, 0.02), biases zero",
            "        if isinstance(module, nn.Linear):",
            "            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)",
            "            if module.bias is not None:",
            "                torch.nn.init.zeros_(module.bias)",
            "        elif isinstance(module, nn.Embedding):",
            "            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)",
            "",
            f"    def forward({', '.join(signature)}):",
            *self._forward_doc(roles),
            *self._forward_body(roles),
        ]
        if self.hf_weights is not None:
            stack = next(n for n in d.nodes if n.kind == "stack")
            hybrid = stack.params["layers"] is not None
            lines += hf_weights.model_methods(self.names(stack.id),
                                              self.config(stack.id, "layer_types").replace("config.", "self.config.")
                                              if hybrid else None)
        return "\n".join(lines) + "\n"

    def _hybrid_stack(self, node: Node) -> list[str]:
        """A hybrid stack: its layers built by the block each layer type names (Config.layer_types)."""
        from .config import block_owner

        built: dict[str, str] = {}
        for name, child in zip(node.params["layers"], node.children):
            if name not in built:
                built[name] = self.construct(child, block_owner(node, name))[0]
        # the names are checked identifiers (design.schema.NAME), written as string literals
        lines = layout.call(layout.BODY, "blocks = {", [f"{json.dumps(n)}: {fn}" for n, fn in built.items()], "}")
        inner = f"[blocks[t](config) for t in {self.config(node.id, 'layer_types')}]"
        return lines + assign_call(layout.BODY, f"self.{self.names(node.id)}", "nn.ModuleList", [inner])

    def _roles_read(self) -> set[str]:
        roles = set()
        for node in self.design.nodes:
            for port in used_ports(node):
                wire = node.wire(port)
                if wire.from_input:
                    roles.add(wire.role)
        return roles

    def _takes(self, roles: set[str]) -> str:
        """What forward needs, in words: the class docstring must not promise ids alone."""
        needed = ["token ids (B, T)"]
        if "documents" in roles:
            needed.append("their documents (B, T)")
        if self.design.input("positions") is not None:
            needed.append("optional positions (B, T)")
        return needed[0] if len(needed) == 1 else ", ".join(needed[:-1]) + " and " + needed[-1]

    def _forward_doc(self, roles: set[str]) -> list[str]:
        lines = ['        """ids (B, T) token ids -> logits (B, T, V).']
        if self.design.input("documents") is not None:
            lines += ["", "        documents (B, T): the document index of each position, non-decreasing",
                      "        along a row; attention never crosses from one document to another."]
        if self.design.input("positions") is not None:
            lines += ["", "        positions (B, T): each token's position, restarting per document;",
                      "        None counts 0..T-1 straight through."]
        if len(lines) == 1:
            return [lines[0] + '"""']
        return lines + ['        """']

    def _forward_body(self, roles: set[str]) -> list[str]:
        d = self.design
        lines = []
        if "documents" in roles:
            lines += [
                "        if documents is None:",
                '            raise ValueError("pass documents (B, T): attention keeps them apart")',
            ]
        for role in ("documents", "positions"):
            if d.input(role) is None:
                lines += [
                    f"        if {role} is not None:",
                    "            raise ValueError(",
                    f'                "this design has no {role} input: {_NO_INPUT[role]}"',
                    "            )",
                ]
        lines.append("        B, T = ids.shape")
        if self.uses_rope or any(n.kind == "pos_embedding" for n, _ in d.walk()):
            lines += [
                "        if T > self.config.context:",
                "            raise ValueError(",
                '                f"{T} positions; the model holds {self.config.context} (its context):"',
                '                " run at most that many tokens a row (--seq) or raise the context"',
                "            )",
            ]
        if "positions" in roles:
            lines += [
                "        if positions is None:",
                "            positions = torch.arange(T, device=ids.device).expand(B, T)",
            ]
        values = [n for n in d.nodes if n.kind != "table"]
        consumers: dict[str, list[tuple[str, str]]] = {n.id: [] for n in values}
        for n in values:
            for port, ref in n.sources.items():
                if ref in consumers and (port == "x" or port in ("q", "k", "v")):
                    consumers[ref].append((n.id, port))
        var: dict[str, str] = {}
        for i, n in enumerate(values):
            following = values[i + 1].id if i + 1 < len(values) else None
            if n.id == d.output and not consumers[n.id]:
                var[n.id] = "logits"
            elif consumers[n.id] == [(following, "x")]:
                var[n.id] = "x"
            else:
                var[n.id] = self.names(n.id)
        for n in values:
            name, out = self.names(n.id), var[n.id]
            if n.kind == "embedding":
                source = ROLE_ARGUMENT[n.wire("x").role]
            elif n.kind == "sdpa":
                raise TensorcadError(n.path, "codegen cannot place an sdpa node at the top level yet")
            else:
                source = var[n.sources["x"]]
            ports = self.top_values(n)
            shape = "# (B, T, V)" if out == "logits" else "# (B, T, C)"
            if n.kind == "stack":
                if out != source:
                    lines.append(f"        {out} = {source}")
                lines.append(f"        for block in self.{name}:")
                lines += assign_call(" " * 12, out, "block", [out, *ports], shape)
            else:
                lines += assign_call(layout.BODY, out, f"self.{name}", [source, *ports], shape)
            if n.kind == "embedding" and n.params["scale"] is not None:
                lines.append("        # scaled as Gemma scales its embedding (by sqrt(dim))")
                lines += layout.statement(layout.BODY, f"{out} = ", f"{out} * self.{self.config(n.id, 'embed_scale')}")
            if n.kind == "linear" and n.params.get("scale") is not None:
                lines.append("        # scaled, as Granite divides its logits by logits_scaling and Cohere multiplies")
                lines += layout.statement(layout.BODY, f"{out} = ", f"{out} * self.{self.config(n.id, 'out_scale')}")
            if n.kind == "linear" and n.params["softcap"] is not None:
                cap = f"self.{self.config(n.id, 'softcap')}"
                lines.append("        # soft-capped, as Gemma 2 caps its logits: |value| < cap")
                lines += layout.statement(layout.BODY, f"{out} = ", f"torch.tanh({out} / {cap}) * {cap}")
        lines.append(f"        return {var[d.output]}")
        return lines
