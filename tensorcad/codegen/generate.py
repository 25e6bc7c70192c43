"""`generate(design) -> str`: one self-contained PyTorch module for a design.

The module reads like nanoGPT's model.py: a docstring, the imports, `Config` with
the design's numbers and `CONFIG = Config()`, the attention and rotary runtime
(`prelude`), the mask and score functions, one small nn.Module per concept, and
`Model(config=CONFIG, form="flex")`. Every identifier comes from `names`; text
from the design reaches the module only through `names.title_text` and
`names.comment_text`, never as code. The same design always gives the same text.
"""

from __future__ import annotations

from ..design import expr as E
from ..design.model import Design, Node
from ..errors import TensorcadError
from ..hf.weights import weight_map
from . import hf_weights, layout, prelude
from .config import ConfigFields
from .masks import Function, mask_function, score_function
from .modules import MLPS, NORMS, PLACEHOLDER, Classes, assign_call, position_embedding
from .names import RESERVED, Namer, comment_text, title_text

ROLE_ARGUMENT = {"tokens": "ids", "documents": "documents", "positions": "positions"}
_I2 = " " * 8
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
    found = set()
    for child in node.children:
        found |= set(used_ports(child))
    return sorted(found)


class _Generator:
    def __init__(self, design: Design):
        self.design = design
        self.names = Namer(RESERVED)
        for node in design.nodes:  # top-level ids claim their names first
            self.names(node.id)
        self.ports = Namer(RESERVED)
        self.config = ConfigFields(design, self.names)
        self.classes = Classes()
        self.functions: dict[str, Function] = {}
        self.attention_classes: list[str] = []
        self.uses_rope = any(n.kind == "rope" for n, _ in design.walk())
        self.roles = {i.name: i.role for i in design.inputs}
        # a design imported from Hugging Face loads (and gives back) transformers' weights
        self.hf_weights = weight_map(design, self.names) if design.source.get("hf") else None

    # -- pieces inside classes --------------------------------------------------------

    def port_args(self, node: Node) -> list[str]:
        return [self.ports(p) for p in used_ports(node)]

    def construct(self, node: Node, owner: str) -> tuple[str, list[str]]:
        """(callable, arguments) building `node` inside a class that holds `config`."""
        f = lambda key: self.config(owner, key)  # noqa: E731
        kind = node.kind
        if kind in NORMS:
            if kind == "rmsnorm" and node.params.get("offset"):
                concept, source = NORMS["rmsnorm_offset"]
                return self.classes(concept, source, owner), [f("dim"), f("eps"), f("norm_offset")]
            concept, source = NORMS[kind]
            return self.classes(concept, source, owner), [f("dim"), f("eps")]
        if kind == "mlp":
            concept, source = MLPS[node.params["activation"]]
            return self.classes(concept, source, owner), [f("dim"), f("hidden"), f("mlp_bias")]
        if kind == "linear":
            out = "vocab_size" if node.id == self.design.output else "out_features"
            return "nn.Linear", [f("dim"), f(out), f"bias={f('bias')}"]
        if kind == "embedding":
            return "nn.Embedding", [f("vocab_size"), f("dim")]
        if kind == "pos_embedding":
            reads = node.wire("pos") is not None
            source = position_embedding(reads, self.ports("pos"))
            return self.classes("PositionEmbedding", source, owner), [f("n_positions"), f("dim")]
        if kind == "gqa_attention":
            return self.attention_class(node, owner), ["config"]
        if kind == "transformer_block":
            return self.block_class(node, owner), ["config"]
        raise TensorcadError(node.path, f"codegen cannot place a {kind!r} node here yet")

    def attention_class(self, node: Node, owner: str) -> str:
        f = lambda key: self.config(owner, key)  # noqa: E731
        sdpa = node.child("sdpa")
        attention = sdpa.attention
        roles = {w.port: w.role for w in sdpa.wires}
        mask = mask_function(attention, roles, self.ports, self.names, self.names(owner))
        score = score_function(attention, self.ports, self.names, self.names(owner))
        for fn in (mask, score):
            if fn is not None:
                self.functions.setdefault(fn.name, fn)
        rope = node.params["rope"] is not None
        ports = self.port_args(node)
        port_values = {p: p for p in ports}
        heads, kv_heads, head_dim = f("n_head"), f("n_kv_head"), f("head_dim")
        bias = f"bias={f('attn_bias')}"
        qkv_bias = bias if node.params["qkv_bias"] is None else f"bias={f('qkv_bias')}"
        qk_norm = node.params["qk_norm"] is not None
        keeps = comment_text(E.to_text(attention.keep)) if attention.keep is not None else "every key"
        lines = [
            f"class {PLACEHOLDER}(nn.Module):",
            '    """Grouped-query attention: H query heads share H_kv key/value heads.',
            "",
            f"    Keeps {keeps}.",
            "",
            "    Shapes: B batch rows, T positions, C model width, H query heads,",
            "    H_kv key/value heads, D head dim.",
            '    """',
            "",
            "    def __init__(self, config):",
            "        super().__init__()",
            f"        self.head_dim = {head_dim}",
        ]
        if sdpa.params["scale"] is not None:
            lines.append(f"        self.scale = {f('attn_scale')}  # multiplies q . k, in place of 1 / sqrt(D)")
        lines += assign_call(_I2, "self.q", "nn.Linear", [f("dim"), f"{heads} * {head_dim}", qkv_bias])
        lines += assign_call(_I2, "self.k", "nn.Linear", [f("dim"), f"{kv_heads} * {head_dim}", qkv_bias])
        lines += assign_call(_I2, "self.v", "nn.Linear", [f("dim"), f"{kv_heads} * {head_dim}", qkv_bias])
        lines += assign_call(_I2, "self.o", "nn.Linear", [f"{heads} * {head_dim}", f("dim"), bias])
        if qk_norm:
            norm, _ = NORMS["rmsnorm"]
            norm = self.classes(norm, NORMS["rmsnorm"][1], owner)
            for which in ("q", "k"):
                lines += assign_call(_I2, f"self.{which}_norm", norm, [head_dim, f("qk_norm_eps")])
        if rope:
            lines += assign_call(_I2, "cos, sin", "rotary_tables",
                                 [head_dim, "config.context", f("rope_theta")])
            lines += [
                '        self.register_buffer("cos", cos, persistent=False)  # (context, D)',
                '        self.register_buffer("sin", sin, persistent=False)  # (context, D)',
            ]
        lines += [
            '        self.form = "flex"  # or "eager"; Model.form sets it',
            "",
            f"    def forward({', '.join(['self', 'x', *ports])}):",
            "        B, T, C = x.shape",
            "        q = self.q(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H, T, D)",
            "        k = self.k(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H_kv, T, D)",
            "        v = self.v(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H_kv, T, D)",
        ]
        if qk_norm:
            # over each head's D features, before the rotation, as Qwen3 does
            lines += [
                "        q = self.q_norm(q)  # (B, H, T, D)",
                "        k = self.k_norm(k)  # (B, H_kv, T, D)",
            ]
        if rope:
            for which, shape in (("q", "(B, H, T, D)"), ("k", "(B, H_kv, T, D)")):
                args = [which, "self.cos", "self.sin"]
                if node.child(f"rope_{which}").wire("pos") is not None:
                    args.append(self.ports("pos"))  # turned by positions restarting per document
                lines += assign_call(_I2, which, "rotate", args, f"# {shape}")
        call_args = ["q", "k", "v"]
        for keyword, fn in (("mask_mod", mask), ("score_mod", score)):
            if fn is None:
                continue
            if fn.factory is None:
                call_args.append(f"{keyword}={fn.name}")
            else:
                lines += layout.statement(_I2, f"{keyword} = ", fn.call(port_values))
                call_args.append(f"{keyword}={keyword}")
        if sdpa.params["scale"] is not None:
            call_args.append("scale=self.scale")
        call_args.append("form=self.form")
        lines += assign_call(_I2, "y", "attend", call_args, "# (B, H, T, D)")
        lines += [
            "        y = y.transpose(1, 2).reshape(B, T, -1)  # (B, T, H * D)",
            "        return self.o(y)  # (B, T, C)",
        ]
        name = self.classes("Attention", "\n".join(lines) + "\n", owner)
        if name not in self.attention_classes:
            self.attention_classes.append(name)
        return name

    def block_class(self, node: Node, owner: str) -> str:
        lines = [
            f"class {PLACEHOLDER}(nn.Module):",
            '    """Pre-norm residual block: x + attention(norm(x)), then x + mlp(norm(x))."""',
            "",
            "    def __init__(self, config):",
            "        super().__init__()",
        ]
        for child in node.children:
            fn, args = self.construct(child, owner)
            lines += assign_call(_I2, f"self.{child.id}", fn, args)
        ports = self.port_args(node)
        lines += ["", f"    def forward({', '.join(['self', 'x', *ports])}):"]
        attention_args = ["self.attention_norm(x)", *(f"{p}={p}" for p in ports)]
        if node.params["post_norms"]:  # Gemma 2: each half's output normalised before the residual add
            lines += assign_call(_I2, "y", "self.attention", attention_args, "# (B, T, C)")
            lines += ["        x = x + self.post_attention_norm(y)  # (B, T, C)",
                      "        x = x + self.post_mlp_norm(self.mlp(self.mlp_norm(x)))  # (B, T, C)", "        return x"]
        else:
            lines += assign_call(_I2, "x", "x + self.attention", attention_args, "# (B, T, C)")
            lines += ["        x = x + self.mlp(self.mlp_norm(x))  # (B, T, C)", "        return x"]
        return self.classes("Block", "\n".join(lines) + "\n", owner)

    # -- the model ------------------------------------------------------------------------

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
                init += assign_call(_I2, f"self.{name}", "nn.Parameter", [f"torch.empty({shape})"])
                tables.append(name)
            elif node.kind == "stack":
                built = [self.construct(child, node.id) for child in node.children]
                n_layer = self.config(node.id, "n_layer")
                if len(built) == 1:
                    fn, args = built[0]
                    inner = f"[{fn}({', '.join(args)}) for _ in range({n_layer})]"
                else:  # blocks taken in turn (alternating windows): layer i is the (i mod n)th
                    kinds = ", ".join(fn for fn, _ in built)
                    args = built[0][1]
                    inner = f"[({kinds})[i % {len(built)}]({', '.join(args)}) for i in range({n_layer})]"
                init += assign_call(_I2, f"self.{name}", "nn.ModuleList", [inner])
            else:
                fn, args = self.construct(node, node.id)
                init += assign_call(_I2, f"self.{name}", fn, args)
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
            lines += hf_weights.model_methods(self.names(stack.id))
        return "\n".join(lines) + "\n"

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
                lines += assign_call(_I2, out, f"self.{name}", [source, *ports], shape)
            if n.kind == "embedding" and n.params["scale"] is not None:
                lines.append("        # scaled as Gemma scales its embedding (by sqrt(dim))")
                lines += layout.statement(_I2, f"{out} = ", f"{out} * self.{self.config(n.id, 'embed_scale')}")
            if n.kind == "linear" and n.params["softcap"] is not None:
                cap = f"self.{self.config(n.id, 'softcap')}"
                lines.append("        # soft-capped, as Gemma 2 caps its logits: |value| < cap")
                lines += layout.statement(_I2, f"{out} = ", f"torch.tanh({out} / {cap}) * {cap}")
        lines.append(f"        return {var[d.output]}")
        return lines

    # -- the module -----------------------------------------------------------------------

    def sections(self) -> list[tuple[str, str]]:
        d = self.design
        model = self.model()  # names every class and function first
        title = title_text(d.name)
        header = (
            f'"""{title}: a PyTorch model generated by tensorcad from the design {title}.\n\n'
            "Needs only torch. Model(config=CONFIG, form=\"flex\") maps token ids (B, T) to\n"
            "logits (B, T, V); form \"eager\" computes the same in plain matmuls.\n"
            '"""\n'
        )
        out = [("header", header), ("imports", prelude.IMPORTS), ("config", self.config.source())]
        if self.attention_classes:
            out.append(("attention runtime", prelude.ATTENTION_RUNTIME))
        if self.uses_rope:
            out.append(("rotary runtime", prelude.ROTARY_RUNTIME))
        functions = [fn.source for fn in self.functions.values()]
        if any("_relative_bucket(" in s for s in functions):
            out.append(("relative bucket", E.RELATIVE_BUCKET_SOURCE))
        if functions:
            out.append(("masks", "\n\n\n".join(f.rstrip("\n") for f in functions) + "\n"))
        for source in self.classes.sources():
            out.append(("class", source))
        if self.hf_weights is not None:
            out.append(("hf weights", hf_weights.table_source(self.hf_weights)))
            out.append(("hf runtime", hf_weights.HF_RUNTIME))
        out.append(("model", model))
        return out


# Sections pasted verbatim from other modules; formatting checks skip them.
VERBATIM = ("imports", "attention runtime", "rotary runtime", "relative bucket", "hf runtime")


def sections(design: Design) -> list[tuple[str, str]]:
    """The generated module as (kind, source) sections, in order."""
    return _Generator(design).sections()


def generate(design: Design) -> str:
    """The PyTorch source of `design`: one module that needs only torch."""
    parts = [text.strip("\n") for _, text in sections(design)]
    # one blank line after the module docstring, two between top-level definitions
    return parts[0] + "\n\n" + "\n\n\n".join(parts[1:]) + "\n"
