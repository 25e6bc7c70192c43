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
from ..design.mixers import STATEFUL, mixers
from ..design.model import Design, Node
from ..design.rope_scaling import is_plain
from ..errors import TensorcadError
from ..hf.weights import weight_map
from . import hf_weights, layout, rotary
from .runtime import prelude
from .config import ConfigFields
from .experts import moe_source, shared_mlp
from .latent import DOC as LATENT_DOC
from .latent import latent_forward, latent_init
from .masks import Function, mask_function, mask_table, score_function
from .mixer_code import MixerWriter
from .runtime.mixers import MIXER_RUNTIME
from .runtime.mtp import MTP_RUNTIME
from .model_class import ModelWriter, used_ports
from .modules import MLPS, NORMS, PLACEHOLDER, Classes, assign_call, position_embedding
from .names import RESERVED, Namer, comment_text, title_text

class _Generator(ModelWriter, MixerWriter):
    def __init__(self, design: Design):
        self.design = design
        # A port is a parameter of the generated forwards: a module-level function of its name would be shadowed
        # there (a port 'causal_same_document_mask' met the mask factory of that name, and the forward raised
        # TypeError), so ports and inputs claim their names before any function is named.
        ports = {port for node, _ in design.walk() for port in (*(w.port for w in node.wires), *node.sources)}
        self.names = Namer(RESERVED | ports | {i.name for i in design.inputs})
        for node in design.nodes:  # top-level ids claim their names first
            self.names(node.id)
        self.ports = Namer(RESERVED)
        self.config = ConfigFields(design, self.names)
        self.classes = Classes()
        self.functions: dict[str, Function] = {}
        self.attention_classes: list[str] = []
        self.mask_uses: dict[str, tuple[Function, list[str]]] = {}  # mask name -> (it, attention paths)
        self.uses_rope = any(n.kind == "rope" for n, _ in design.walk())
        self.turn_ports: list[str] = []  # while a stack's blocks are built: the ports any of them reads
        self.uses_rotary = any(n.kind == "rope" and not is_plain(n.params) for n, _ in design.walk())
        self.roles = {i.name: i.role for i in design.inputs}
        # The blocks of a hybrid stack take every port the stack hands down (each block reads its own).
        self.stack_ports = {c.name: used_ports(n) for n in design.nodes if n.kind == "stack"
                            and n.params["layers"] is not None for c in n.children}
        # a design imported from Hugging Face loads (and gives back) transformers' weights
        self.hf_weights = weight_map(design, self.names) if design.source.get("hf") else None

    # -- pieces inside classes --------------------------------------------------------

    def port_args(self, node: Node) -> list[str]:
        return [self.ports(p) for p in self.stack_ports.get(node.name, used_ports(node))]

    def construct(self, node: Node, owner: str) -> tuple[str, list[str]]:
        """(callable, arguments) building `node` inside a class that holds `config`."""
        f = lambda key: self.config(owner, key)  # noqa: E731
        kind = node.kind
        if kind in NORMS:
            if kind == "rmsnorm" and node.params.get("offset"):
                concept, source = NORMS["rmsnorm_offset"]
                return self.classes(concept, source, owner), [f("dim"), f("eps"), f("norm_offset")]
            if kind == "layernorm" and not node.params.get("bias", True):
                concept, source = NORMS["layernorm_nobias"]
            else:
                concept, source = NORMS[kind]
            return self.classes(concept, source, owner), [f("dim"), f("eps")]
        if kind == "mlp":
            concept, source = MLPS[node.params["activation"]]
            return self.classes(concept, source, owner), [f("dim"), f("hidden"), f("mlp_bias")]
        if kind == "moe":
            shared = shared_mlp(node)
            shared_class = self.classes(shared[0], shared[1], owner) if shared is not None else None
            return self.classes("MoE", moe_source(node, f, shared_class), owner), ["config"]
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
        if kind in STATEFUL:
            return self.mixer_class(node, owner), ["config"]
        if kind == "mixer_block":
            return self.mixer_block_class(node, owner), ["config"]
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
        if mask is not None:
            paths = self.mask_uses.setdefault(mask.name, (mask, []))[1]
            if attention.path not in paths:
                paths.append(attention.path)
        rope = node.params["rope"] is not None
        ports = self.port_args(node)
        port_values = {p: p for p in ports}
        heads, kv_heads, head_dim = f("n_head"), f("n_kv_head"), f("head_dim")
        bias = f"bias={f('attn_bias')}"
        qkv_bias = bias if node.params["qkv_bias"] is None else f"bias={f('qkv_bias')}"
        qk_norm = node.params["qk_norm"] is not None
        keeps = comment_text(E.to_text(attention.keep)) if attention.keep is not None else "every key"
        latent = node.params["latent"] is not None
        lines = [
            f"class {PLACEHOLDER}(nn.Module):",
            *(LATENT_DOC if latent else ['    """Grouped-query attention: H query heads share H_kv key/value heads.']),
            "",
            f"    Keeps {keeps}.",
            "",
            "    Shapes: B batch rows, T positions, C model width, H query heads,",
            "    H_kv key/value heads, D head dim." if not latent else "    D q/k head dim, R rotated, Dv value dim.",
            '    """',
            "",
            "    def __init__(self, config):",
            "        super().__init__()",
            f"        self.head_dim = {head_dim}",
        ]
        if sdpa.params["scale"] is not None:
            lines.append(f"        self.scale = {f('attn_scale')}  # multiplies q . k, in place of 1 / sqrt(D)")
        if latent:
            lines += latent_init(node, f, self.classes(*NORMS["rmsnorm"], owner))
        else:
            lines += assign_call(layout.BODY, "self.q", "nn.Linear", [f("dim"), f"{heads} * {head_dim}", qkv_bias])
            lines += assign_call(layout.BODY, "self.k", "nn.Linear", [f("dim"), f"{kv_heads} * {head_dim}", qkv_bias])
            lines += assign_call(layout.BODY, "self.v", "nn.Linear", [f("dim"), f"{kv_heads} * {head_dim}", qkv_bias])
            lines += assign_call(layout.BODY, "self.o", "nn.Linear", [f"{heads} * {head_dim}", f("dim"), bias])
        if qk_norm:
            offset = bool(node.params["qk_norm"].get("offset"))
            whole = node.params["qk_norm"].get("scope") == "all"  # OLMo 2: over the projection, every head at once
            concept, source = NORMS["rmsnorm_offset" if offset else "rmsnorm"]
            norm = self.classes(concept, source, owner)
            for which, count in (("q", heads), ("k", kv_heads)):
                width = f"{count} * {head_dim}" if whole else head_dim
                args = [width, f("qk_norm_eps"), *([f("qk_norm_offset")] if offset else [])]
                lines += assign_call(layout.BODY, f"self.{which}_norm", norm, args)
        rope_params = node.child("rope_q").params if rope else None
        plain = rope and is_plain(rope_params)
        if rope and not plain:
            rotary_class = self.classes("Rotary", rotary.rotary_class(rope_params, f), owner)
            lines += assign_call(layout.BODY, "self.rotary", rotary_class, ["config"])
        if plain:
            lines += assign_call(layout.BODY, "cos, sin", "rotary_tables",
                                 ["self.rope_dim" if latent else head_dim, "config.context", f("rope_theta")])
            lines += [
                '        self.register_buffer("cos", cos, persistent=False)  # (context, D)',
                '        self.register_buffer("sin", sin, persistent=False)  # (context, D)',
            ]
        lines += [
            '        self.form = "flex"  # or "eager"; Model.form sets it',
            "",
            f"    def forward({', '.join(['self', 'x', *ports])}):",
            "        B, T, C = x.shape",
        ]
        whole = qk_norm and node.params["qk_norm"].get("scope") == "all"
        rotations = []
        for which in ("q", "k"):
            args = [] if not plain else ["self.cos", "self.sin"]
            if rope and node.child(f"rope_{which}").wire("pos") is not None:
                args.append(self.ports("pos"))  # turned by positions restarting per document
            rotations.append(("rotate" if plain else "self.rotary", args))
        if latent:
            lines += latent_forward(node, rotations)
        elif whole:  # over each whole projection, every head's features at once, before the heads split (OLMo 2)
            lines += ["        q = self.q_norm(self.q(x))  # (B, T, H * D)",
                      "        k = self.k_norm(self.k(x))  # (B, T, H_kv * D)",
                      "        q = q.view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H, T, D)",
                      "        k = k.view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H_kv, T, D)"]
        else:
            lines += ["        q = self.q(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H, T, D)",
                      "        k = self.k(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H_kv, T, D)"]
        if not latent:
            lines.append("        v = self.v(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H_kv, T, D)")
        if qk_norm and not whole:
            # over each head's D features, before the rotation, as Qwen3 does
            lines += [
                "        q = self.q_norm(q)  # (B, H, T, D)",
                "        k = self.k_norm(k)  # (B, H_kv, T, D)",
            ]
        if rope and not latent:
            for (which, shape), (fn, args) in zip((("q", "(B, H, T, D)"), ("k", "(B, H_kv, T, D)")), rotations):
                lines += assign_call(layout.BODY, which, fn, [which, *args], f"# {shape}")
        call_args = ["q", "k", "v"]
        for keyword, fn in (("mask_mod", mask), ("score_mod", score)):
            if fn is None:
                continue
            if fn.factory is None:
                call_args.append(f"{keyword}={fn.name}")
            else:
                lines += layout.statement(layout.BODY, f"{keyword} = ", fn.call(port_values))
                call_args.append(f"{keyword}={keyword}")
        if sdpa.params["scale"] is not None:
            call_args.append("scale=self.scale")
        call_args.append("form=self.form")
        lines += assign_call(layout.BODY, "y", "attend", call_args, "# (B, H, T, D)")
        lines += [
            "        y = y.transpose(1, 2).reshape(B, T, -1)  # (B, T, H * D)",
            "        return self.o(y)  # (B, T, C)",
        ]
        name = self.classes("Attention", "\n".join(lines) + "\n", owner)
        if name not in self.attention_classes:
            self.attention_classes.append(name)
        return name

    def block_class(self, node: Node, owner: str) -> str:
        p = node.params
        lines = [
            f"class {PLACEHOLDER}(nn.Module):",
            f'    """{_BLOCK_DOCS[_block_form(p)]}"""',
            "",
            "    def __init__(self, config):",
            "        super().__init__()",
        ]
        for child in node.children:
            fn, args = self.construct(child, owner)
            lines += assign_call(layout.BODY, f"self.{child.id}", fn, args)
        if p["residual_scale"] is not None:  # Granite: each half's output scaled before its residual add
            lines.append(f"        self.residual_scale = {self.config(owner, 'residual_scale')}")
        ports = self.port_args(node)
        # a port only the other blocks taken in turn read (SmolLM3's positions, in a layer without rope)
        unread = [f"{self.ports(q)}=None" for q in self.turn_ports if self.ports(q) not in ports]
        lines += ["", f"    def forward({', '.join(['self', 'x', *ports, *unread])}):"]
        # in a hybrid stack a block takes every port the stack hands down; its attention, only those it reads
        attention_ports = [self.ports(q) for q in used_ports(node.child("attention"))]
        lines += self._block_body(p, [f"{port}={port}" for port in attention_ports])
        return self.classes("Block", "\n".join(lines) + "\n", owner)

    def _block_body(self, p, port_args: list[str]) -> list[str]:
        scaled = (lambda e: f"{e} * self.residual_scale") if p["residual_scale"] is not None else (lambda e: e)
        pre = p["pre_norms"]
        attention_in = "self.attention_norm(x)" if pre else "x"
        mlp_in = "self.mlp_norm(x)" if pre else "x"
        lines: list[str] = []
        if p["parallel"]:  # one norm feeds both halves, their outputs added together (Cohere)
            lines.append("        h = self.attention_norm(x)  # (B, T, C)")
            lines += assign_call(layout.BODY, "y", "self.attention", ["h", *port_args], "# (B, T, C)")
            lines.append(f"        x = x + {scaled('y')} + {scaled('self.mlp(h)')}  # (B, T, C)")
        elif p["post_norms"]:  # Gemma 2: each half's output normalised before the residual add
            lines += assign_call(layout.BODY, "y", "self.attention", [attention_in, *port_args], "# (B, T, C)")
            lines += [f"        x = x + {scaled('self.post_attention_norm(y)')}  # (B, T, C)",
                      f"        x = x + {scaled(f'self.post_mlp_norm(self.mlp({mlp_in}))')}  # (B, T, C)"]
        elif p["residual_scale"] is not None or not pre:
            lines += assign_call(layout.BODY, "y", "self.attention", [attention_in, *port_args], "# (B, T, C)")
            lines += [f"        x = x + {scaled('y')}  # (B, T, C)",
                      f"        x = x + {scaled(f'self.mlp({mlp_in})')}  # (B, T, C)"]
        else:
            lines += assign_call(layout.BODY, "x", "x + self.attention", [attention_in, *port_args], "# (B, T, C)")
            lines.append("        x = x + self.mlp(self.mlp_norm(x))  # (B, T, C)")
        return lines + ["        return x"]

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
        if mixers(d):
            out.append(("mixer runtime", MIXER_RUNTIME))
        if self.uses_rotary:
            out.append(("rotary beyond plain rope", rotary.ROTARY_RUNTIME))
        functions = [fn.source for fn in self.functions.values()]
        if any("_relative_bucket(" in s for s in functions):
            out.append(("relative bucket", E.RELATIVE_BUCKET_SOURCE))
        if functions:
            out.append(("masks", "\n\n\n".join(f.rstrip("\n") for f in functions) + "\n"))
        if self.attention_classes:
            out.append(("mask table", mask_table(self.mask_uses)))
        for source in self.classes.sources():
            out.append(("class", source))
        if self.hf_weights is not None:
            out.append(("hf weights", hf_weights.table_source(self.hf_weights)))
            out.append(("hf runtime", hf_weights.HF_RUNTIME))
        out.append(("model", model))
        if d.mtp is not None:
            out[1] = ("imports", prelude.IMPORTS.replace("import contextlib\n", "import contextlib\nimport copy\n", 1))
            out += [("mtp runtime", MTP_RUNTIME), ("mtp", self.mtp_source())]
        return out

    def mtp_source(self) -> str:
        """The design's MTP depth and the training model: the model with its MTP modules (codegen.runtime.mtp)."""
        d = self.design
        head = d.node(d.output)
        names = {"embedding": next(n.id for n in d.nodes if n.kind == "embedding"), "head": head.id,
                 "norm": head.sources["x"], "blocks": [n.id for n in d.nodes if n.kind == "stack"][-1]}
        args = ["Model(config, form)", "MTP_DEPTH", *(f'{k}="{self.names(v)}"' for k, v in names.items())]
        return "\n".join([
            f"MTP_DEPTH = {d.mtp}  # the design's multi-token prediction modules",
            "",
            "",
            'def training_model(config=CONFIG, form="flex"):',
            '    """The model as it trains: with its MTP modules (``heads``, ``mtp_targets``)."""',
            *layout.call("    ", "return with_mtp(", args),
        ]) + "\n"


def _block_form(p) -> str:
    if p["parallel"]:
        return "parallel"
    return ("pre" if p["pre_norms"] else "") + ("post" if p["post_norms"] else "") or "none"


_BLOCK_DOCS = {
    "pre": "Pre-norm residual block: x + attention(norm(x)), then x + mlp(norm(x)).",
    "prepost": "Pre-norm residual block: x + attention(norm(x)), then x + mlp(norm(x)).",
    "post": "Post-norm residual block: x + norm(attention(x)), then x + norm(mlp(x)).",
    "none": "Residual block: x + attention(x), then x + mlp(x).",
    "parallel": "Parallel residual block: x + attention(norm(x)) + mlp(norm(x)), one norm.",
}


# Sections pasted verbatim from other modules; formatting checks skip them.
VERBATIM = ("imports", "attention runtime", "rotary runtime", "rotary beyond plain rope", "mixer runtime",
            "relative bucket", "hf runtime", "mtp runtime")


def sections(design: Design) -> list[tuple[str, str]]:
    """The generated module as (kind, source) sections, in order."""
    return _Generator(design).sections()


def generate(design: Design) -> str:
    """The PyTorch source of `design`: one module that needs only torch."""
    parts = [text.strip("\n") for _, text in sections(design)]
    # one blank line after the module docstring, two between top-level definitions
    return parts[0] + "\n\n" + "\n\n\n".join(parts[1:]) + "\n"
