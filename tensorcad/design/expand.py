"""Each kind's node built from its checked params: the leaves, and the composites expanded.

- `stack` repeats its block (one variant a window, taken in turn); the block's
  `x` is the previous repetition's output.
- `transformer_block` is norm, `gqa_attention`, norm, `mlp`, with residuals.
- `gqa_attention` is q, k, v projections, a rotation of q and k, `sdpa`, o.
- `sdpa` holds the `Attention`: its mask and score parsed, what it keeps.

Ports a composite does not use itself are handed down by name (`_hand`) to the
child that can take them, so a `doc` wired into a stack reaches every mask in it.
`Expander` is the half of the resolver that knows the kinds; `resolve` is the
half that reads the design's top level and asks it for each node.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

from ..errors import TensorcadError, join, shown
from . import expr as E
from .catalog import KINDS, LATENT
from .expand_mixers import MixerExpander
from .model import Attention, Node, Wire
from .raw import check_kind, no_unknown
from .rope_scaling import rotary_params
from .schema import Kind, check_params


class Expander(MixerExpander):
    """Builds nodes by kind; ``nodes`` holds the top-level nodes resolved so far (a tie names one).

    The stateful mixers, the block around one and a hybrid stack's named blocks are
    `MixerExpander`'s (`expand_mixers`)."""

    nodes: dict[str, Node]

    def _build(self, kind: Kind, id: str, name: str, path: str, raw_params: Any,
               dim_in: int | None, handed: dict[str, Wire]) -> Node:
        params = check_params(kind, raw_params, path)
        if not kind.extra_ports:
            for port, w in handed.items():
                if kind.port(port) is None:
                    raise TensorcadError(w.path, f"port {shown(port)} is handed to {name} ({kind.name}), which reads no such port")
        build = getattr(self, f"_{kind.name}")
        return build(id=id, name=name, path=path, params=params, dim_in=dim_in, handed=handed)

    def _leaf(self, kind: str, id, name, path, params, dim_in, dim, wires=()) -> Node:
        return Node(id, name, kind, path, MappingProxyType(params), dim_in, dim, tuple(wires))

    def _embedding(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("embedding", id, name, path, params, None, params["dim"], handed.values())

    def _pos_embedding(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("pos_embedding", id, name, path, params, dim_in, dim_in, handed.values())

    def _linear(self, id, name, path, params, dim_in, handed) -> Node:
        tie = params["tie"]
        if tie is not None:
            tpath = join(path, "tie")
            target = self.nodes.get(tie)
            if target is None or target.kind != "embedding":
                raise TensorcadError(tpath, f"{shown(tie)} is not an embedding node defined before this one")
            if (target.params["vocab"], target.params["dim"]) != (params["out"], dim_in):
                raise TensorcadError(
                    tpath,
                    f"a tied projection {dim_in} -> {params['out']} does not fit embedding {shown(tie)} "
                    f"({target.params['vocab']} x {target.params['dim']})",
                )
        return self._leaf("linear", id, name, path, params, dim_in, params["out"])

    def _rmsnorm(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("rmsnorm", id, name, path, params, dim_in, dim_in)

    def _layernorm(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("layernorm", id, name, path, params, dim_in, dim_in)

    def _mlp(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("mlp", id, name, path, params, dim_in, dim_in)

    def _moe(self, id, name, path, params, dim_in, handed) -> Node:
        """A mixture of experts: its params checked against each other, the shared mlp's filled in."""
        if params["top_k"] > params["experts"]:
            raise TensorcadError(join(path, "top_k"), f"{params['top_k']} is more than the {params['experts']} experts")
        if params["drop"] == "none" and params["capacity"] is not None:
            raise TensorcadError(join(path, "capacity"), "a capacity factor drops the tokens past it; say which "
                                                         "(drop 'position' or 'probs'), or leave capacity null (dropless)")
        if params["drop"] != "none" and params["capacity"] is None:
            raise TensorcadError(join(path, "drop"), f"drop {params['drop']!r} drops tokens past a capacity; "
                                                     "give capacity (a factor), or drop 'none'")
        if params["bias_update"] is not None and not params["router_bias"]:
            raise TensorcadError(join(path, "bias_update"), "the auxiliary-loss-free update moves the score-"
                                                            "correction bias; set router_bias true")
        if params["shared"] is not None:
            params = {**params, "shared": check_params(KINDS["mlp"], params["shared"], join(path, "shared"))}
        elif params["shared_gate"]:
            raise TensorcadError(join(path, "shared_gate"), "a gate scales the shared experts; give shared")
        return self._leaf("moe", id, name, path, params, dim_in, dim_in)

    def _ffn(self, name, path, raw, dim) -> Node:
        """A block's feed-forward: an mlp, or a moe when its params say {"kind": "moe", ...}."""
        kind = KINDS["mlp"]
        if isinstance(raw, dict) and "kind" in raw:
            check_kind(raw["kind"], join(path, "kind"))
            if raw["kind"] not in ("mlp", "moe"):
                raise TensorcadError(join(path, "kind"), f"a block's feed-forward is an mlp or a moe, not {shown(raw['kind'])}")
            kind, raw = KINDS[raw["kind"]], {k: v for k, v in raw.items() if k != "kind"}
        return self._build(kind, "mlp", f"{name}.mlp", path, raw, dim, {})

    def _table(self, id, name, path, params, dim_in, handed) -> Node:
        return self._leaf("table", id, name, path, params, None, None)

    def _rope(self, id, name, path, params, dim_in, handed) -> Node:
        if params["head_dim"] % 2:
            raise TensorcadError(join(path, "head_dim"), f"{params['head_dim']} is odd; rotary pairs features")
        if dim_in is not None and dim_in % params["head_dim"]:
            raise TensorcadError(join(path, "head_dim"), f"{params['head_dim']} does not divide the input width {dim_in}")
        params = rotary_params(params, path)
        return self._leaf("rope", id, name, path, params, dim_in, dim_in, [w for w in handed.values() if w.port == "pos"])

    def _sdpa(self, id, name, path, params, dim_in, handed) -> Node:
        heads, kv_heads = params["heads"], params["kv_heads"] or params["heads"]
        if heads % kv_heads:
            raise TensorcadError(join(path, "heads"), f"{heads} is not divisible by kv_heads {kv_heads}")
        head_dim = params["head_dim"]
        if head_dim is None:
            q = handed.get("q")
            qdim = self.nodes[q.source].dim if q else None
            if qdim is None or qdim % heads:
                raise TensorcadError(join(path, "head_dim"), "missing: give head_dim")
            head_dim = qdim // heads
        values = params.get("value_dim") or head_dim
        for port, width in (("q", heads * head_dim), ("k", kv_heads * head_dim), ("v", kv_heads * values)):
            w = handed.get(port)
            if w is not None and self.nodes[w.source].dim != width:
                raise TensorcadError(w.path, f"{shown(w.source)} is {self.nodes[w.source].dim} wide; {port} needs {width}")
        attention = self._attention(path, params, heads, kv_heads, head_dim, handed)
        if params.get("value_dim") is not None or params.get("cached") is not None:
            attention = replace(attention, value_dim=params.get("value_dim"), cached=params.get("cached"))
        params = {**{k: v for k, v in params.items() if k != "cached"}, "kv_heads": kv_heads, "head_dim": head_dim}
        wires = [w for w in handed.values() if w.port not in ("q", "k", "v")]
        node = self._leaf("sdpa", id, name, path, params, dim_in, heads * values, wires)
        return replace(node, attention=attention)

    def _attention(self, path, params, heads, kv_heads, head_dim, handed) -> Attention:
        tensors = {p: w for p, w in handed.items() if w.from_input}
        tables = {
            p: w for p, w in handed.items()
            if not w.from_input and p not in ("q", "k", "v") and self.nodes[w.source].kind == "table"
        }
        numbers = {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim}
        if params["window"] is not None:
            numbers["window"] = params["window"]
        mask = score = None
        if params["mask"] is not None:
            mask = E.parse(params["mask"], E.Scope("mask", numbers, frozenset(tensors),
                                                   {p: len(self.nodes[w.source].params["shape"]) for p, w in tables.items()}),
                           join(path, "mask"))
        if params["score"] is not None:
            score = E.parse(params["score"], E.Scope("score", numbers, frozenset(tensors),
                                                     {p: len(self.nodes[w.source].params["shape"]) for p, w in tables.items()}),
                            join(path, "score"))
        read = (E.reads(mask) if mask is not None else frozenset()) | (E.reads(score) if score is not None else frozenset())
        for port, w in {**tensors, **tables}.items():
            if port not in read and port != "pos":
                raise TensorcadError(w.path, f"port {shown(port)} reaches {path}, whose mask and score read nothing by that name")
        causal = E.Compare(">=", E.Var("q"), E.Var("kv")) if params["causal"] else None
        window = None
        if params["window"] is not None:
            distance = E.Binary("-", E.Var("q"), E.Var("kv"))
            if not params["causal"]:
                distance = E.Call("abs", (distance,))
            window = E.Compare("<", distance, E.Param("window", params["window"]))
        return Attention(
            path=path, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
            causal=params["causal"], window=params["window"], mask=mask, score=score,
            keep=E.all_of(causal, window, mask),
            tensors=MappingProxyType(tensors), tables=MappingProxyType(tables),
        )

    def _hand(self, handed: dict[str, Wire], child: str, ports=None) -> dict[str, Wire]:
        """Hand ports one level down, extending each route by the child's port."""
        return {
            p: replace(w, route=w.route + (f"{child}.{p}",))
            for p, w in handed.items()
            if ports is None or p in ports
        }

    def _gqa_attention(self, id, name, path, params, dim_in, handed) -> Node:
        heads = params["heads"]
        kv_heads = params["kv_heads"] or heads
        if heads % kv_heads:
            raise TensorcadError(join(path, "heads"), f"{heads} is not divisible by kv_heads {kv_heads}")
        head_dim = params["head_dim"]
        if head_dim is None:
            if dim_in % heads:
                raise TensorcadError(join(path, "heads"), f"width {dim_in} is not divisible by {heads} heads; give head_dim")
            head_dim = dim_in // heads
        bias = params["bias"]
        qkv_bias = bias if params["qkv_bias"] is None else params["qkv_bias"]
        if params["latent"] is not None:
            return self._latent_attention(id, name, path, params, dim_in, handed, heads, kv_heads, head_dim)
        if params["value_dim"] not in (None, head_dim):
            raise TensorcadError(join(path, "value_dim"), f"{params['value_dim']} differs from head_dim {head_dim}: "
                                                          "values of another width are a latent attention's (give "
                                                          "latent)")
        children = [
            self._leaf("linear", "q", f"{name}.q", path, {"out": heads * head_dim, "bias": qkv_bias, "tie": None}, dim_in, heads * head_dim),
            self._leaf("linear", "k", f"{name}.k", path, {"out": kv_heads * head_dim, "bias": qkv_bias, "tie": None}, dim_in, kv_heads * head_dim),
            self._leaf("linear", "v", f"{name}.v", path, {"out": kv_heads * head_dim, "bias": qkv_bias, "tie": None}, dim_in, kv_heads * head_dim),
        ]
        if params["qk_norm"] is not None:
            # one RMSNorm of head_dim features for q and one for k, shared by every head (Qwen3), or one
            # over each whole projection (OLMo 2: scope "all")
            qpath = join(path, "qk_norm")
            raw = params["qk_norm"]  # an object: the catalog's check saw to it
            scope = raw.get("scope", "head")
            if scope not in ("head", "all"):
                raise TensorcadError(join(qpath, "scope"), f"{shown(scope)} is not one of 'head', 'all'")
            norm = check_params(KINDS["rmsnorm"], {k: v for k, v in raw.items() if k != "scope"}, qpath)
            params = {**params, "qk_norm": {**norm, "scope": scope}}
            for which, heads_of in (("q", heads), ("k", kv_heads)):
                width = head_dim if scope == "head" else heads_of * head_dim
                children.append(self._leaf("rmsnorm", f"{which}_norm", f"{name}.{which}_norm", qpath, norm,
                                           width, width))
        if params["rope"] is not None:
            rope_raw = params["rope"]
            rpath = join(path, "rope")
            rope = check_params(KINDS["rope"], {"head_dim": head_dim, **rope_raw}, rpath)
            if rope["head_dim"] != head_dim:
                raise TensorcadError(join(rpath, "head_dim"), f"{rope['head_dim']} differs from the attention's head_dim {head_dim}")
            for which, width in (("q", heads * head_dim), ("k", kv_heads * head_dim)):
                children.append(self._rope(f"rope_{which}", f"{name}.rope_{which}", rpath, rope, width,
                                           self._hand(handed, f"{name}.rope_{which}", ("pos",))))
        return self._attention_node(id, name, path, params, dim_in, handed, children, kv_heads, head_dim)

    def _attention_node(self, id, name, path, params, dim_in, handed, children, kv_heads, head_dim,
                        cached=None) -> Node:
        """The sdpa and output projection after ``children`` (the projections, norms and rotations)."""
        sdpa_params = {k: params[k] for k in ("heads", "kv_heads", "head_dim", "causal", "window", "mask", "score",
                                              "scale", "value_dim")}
        sdpa_params.update(kv_heads=kv_heads, head_dim=head_dim, cached=cached)
        values = params["value_dim"] or head_dim
        sdpa = self._sdpa("sdpa", f"{name}.sdpa", path, sdpa_params, params["heads"] * head_dim,
                          self._hand(handed, f"{name}.sdpa"))
        children = [*children, sdpa, self._leaf("linear", "o", f"{name}.o", path,
                                                {"out": dim_in, "bias": params["bias"], "tie": None},
                                                params["heads"] * values, dim_in)]
        params = {**params, "kv_heads": kv_heads, "head_dim": head_dim}
        node = self._leaf("gqa_attention", id, name, path, params, dim_in, dim_in, handed.values())
        return replace(node, children=tuple(children))

    def _latent_attention(self, id, name, path, params, dim_in, handed, heads, kv_heads, head_dim) -> Node:
        """Multi-head latent attention (DeepSeek-V2 section 2.1; transformers' DeepseekV3Attention): q through an
        optional rank-q_rank latent, every head's key and value from one rank-kv_rank latent, a decoupled rotary
        part of rope_dim features a head, the key's shared by every head."""
        lpath = join(path, "latent")
        latent = check_params(LATENT, params["latent"], lpath)
        if kv_heads != heads:
            raise TensorcadError(join(path, "kv_heads"), f"{kv_heads} differs from heads {heads}: a latent gives "
                                                         "every head its own key and value")
        for key in ("qk_norm", "qkv_bias"):
            if params[key] is not None:
                raise TensorcadError(join(path, key), "a latent attention normalises its latents, not q and k, and "
                                                      "its biases are bias's")
        rope_dim, values = latent["rope_dim"], params["value_dim"] or head_dim
        if rope_dim >= head_dim:
            raise TensorcadError(join(lpath, "rope_dim"), f"{rope_dim} leaves no unrotated feature of the "
                                                          f"{head_dim}-wide head")
        if params["rope"] is None:
            raise TensorcadError(join(path, "rope"), "a latent attention rotates its rope_dim features: give rope")
        bias = params["bias"]
        norm = {"eps": latent["eps"]}

        def linear(id, width_in, out):
            return self._leaf("linear", id, f"{name}.{id}", path, {"out": out, "bias": bias, "tie": None}, width_in, out)

        children = []
        if latent["q_rank"] is None:
            children.append(linear("q", dim_in, heads * head_dim))
        else:
            children += [linear("q_a", dim_in, latent["q_rank"]),
                         self._leaf("rmsnorm", "q_a_norm", f"{name}.q_a_norm", lpath, norm, latent["q_rank"],
                                    latent["q_rank"]),
                         linear("q_b", latent["q_rank"], heads * head_dim)]
        kv_rank = latent["kv_rank"]
        children += [linear("kv_a", dim_in, kv_rank + rope_dim),
                     self._leaf("rmsnorm", "kv_a_norm", f"{name}.kv_a_norm", lpath, norm, kv_rank, kv_rank),
                     linear("kv_b", kv_rank, heads * (head_dim - rope_dim + values))]
        rpath = join(path, "rope")
        rope = check_params(KINDS["rope"], {"head_dim": rope_dim, **params["rope"]}, rpath)
        if rope["head_dim"] != rope_dim:
            raise TensorcadError(join(rpath, "head_dim"), f"{rope['head_dim']} differs from the latent's rope_dim "
                                                          f"{rope_dim}")
        for which, width in (("q", heads * rope_dim), ("k", rope_dim)):
            children.append(self._rope(f"rope_{which}", f"{name}.rope_{which}", rpath, rope, width,
                                       self._hand(handed, f"{name}.rope_{which}", ("pos",))))
        params = {**params, "latent": latent}
        return self._attention_node(id, name, path, params, dim_in, handed, children, kv_heads, head_dim,
                                    cached=kv_rank + rope_dim)

    def _transformer_block(self, id, name, path, params, dim_in, handed) -> Node:
        dim = params["dim"] if params["dim"] is not None else dim_in
        if dim != dim_in:
            raise TensorcadError(join(path, "dim"), f"{dim} differs from its input's width {dim_in}")
        norm = KINDS[params["norm"]]
        norm_params = {"eps": params["eps"]}
        if params["norm_offset"]:
            if norm.name != "rmsnorm":
                raise TensorcadError(join(path, "norm_offset"), f"an offset scales an rmsnorm; this block's norm is {norm.name}")
            norm_params["offset"] = params["norm_offset"]
        if not params["norm_bias"]:
            if norm.name != "layernorm":
                raise TensorcadError(join(path, "norm_bias"), f"a bias is a layernorm's; this block's norm is {norm.name}")
            norm_params["bias"] = False
        if params["parallel"] and (params["post_norms"] or not params["pre_norms"]):
            raise TensorcadError(join(path, "parallel"), "a parallel block has one norm before both halves; "
                                                         "it takes neither post_norms nor pre_norms false")
        attention = self._build(KINDS["gqa_attention"], "attention", f"{name}.attention", join(path, "attention"),
                                params["attention"], dim, self._hand(handed, f"{name}.attention"))
        mlp = self._ffn(name, join(path, "mlp"), params["mlp"], dim)
        def norm_leaf(id):
            return self._leaf(norm.name, id, f"{name}.{id}", path, norm_params, dim, dim)

        if params["parallel"]:  # Cohere: one norm feeds both halves
            children = (norm_leaf("attention_norm"), attention, mlp)
        elif params["post_norms"]:  # Gemma 2: each half's output normalised before its residual add
            pre = params["pre_norms"]  # OLMo 2 has the norms after each half only
            children = ((norm_leaf("attention_norm"),) if pre else ()) + (attention, norm_leaf("post_attention_norm")) + (
                (norm_leaf("mlp_norm"),) if pre else ()) + (mlp, norm_leaf("post_mlp_norm"))
        elif params["pre_norms"]:
            children = (norm_leaf("attention_norm"), attention, norm_leaf("mlp_norm"), mlp)
        else:
            children = (attention, mlp)
        node = self._leaf("transformer_block", id, name, path, {**params, "dim": dim}, dim_in, dim, handed.values())
        return replace(node, children=children)

    def _stack(self, id, name, path, params, dim_in, handed) -> Node:
        block = params["block"]
        if block is None or params["blocks"] is not None or params["layers"] is not None:
            if block is not None:
                raise TensorcadError(join(path, "block"), "a stack takes a block, or blocks and layers, not both")
            children = self._named_blocks(name, path, params, dim_in, handed)
            node = self._leaf("stack", id, name, path, params, dim_in, dim_in, handed.values())
            return replace(node, children=tuple(children), repeat=params["repeat"] // len(children))
        bpath = join(path, "block")
        if "params" in block:
            no_unknown(block, ("kind", "params"), bpath, "a block")
        kind_name = block.get("kind")
        check_kind(kind_name, join(bpath, "kind"))
        kind = KINDS[kind_name]
        if kind.port("x") is None or kind.name in ("embedding", "stack"):
            raise TensorcadError(join(bpath, "kind"), f"a stack repeats a block that maps x to x; {shown(kind_name)} does not")
        if "params" in block:
            inner, ipath = block["params"], join(bpath, "params")
        else:  # the block's params may also sit beside its kind
            inner, ipath = {k: v for k, v in block.items() if k != "kind"}, bpath
        windows, ropes = params["windows"], params["ropes"]
        if windows is not None and ropes is not None and len(windows) != len(ropes):
            raise TensorcadError(join(path, "ropes"), f"{len(ropes)} ropes for {len(windows)} windows: "
                                                      "each block taken in turn has one of each")
        if windows is None and ropes is None:
            variants = [inner]
        else:
            # one block per window (and rope), taken in turn over the stack's repetitions
            turns = {"window": windows, "rope": ropes}
            for key, values in turns.items():
                if values is None:
                    continue
                wpath = join(path, f"{key}s")
                if len(values) > params["repeat"]:
                    raise TensorcadError(wpath, f"{len(values)} {key}s for {params['repeat']} repetitions")
                if kind.name not in ("transformer_block", "gqa_attention"):
                    raise TensorcadError(wpath, f"{key}s set an attention's {key}; a {kind.name} block has none")
            variants = []
            for i in range(len(windows if windows is not None else ropes)):
                chosen = {key: values[i] for key, values in turns.items() if values is not None}
                variant = dict(inner) if isinstance(inner, dict) else inner
                if kind.name == "transformer_block" and isinstance(inner, dict):
                    attention = inner.get("attention")
                    variant["attention"] = {**attention, **chosen} if isinstance(attention, dict) else attention
                elif isinstance(inner, dict):
                    variant.update(chosen)
                variants.append(variant)
        children = []
        for i, variant in enumerate(variants):
            cid = "block" if i == 0 else f"block_{i}"
            given = handed
            if ropes is not None and ropes[i] is None:  # a block without rope among ropes in turn takes no positions
                given = {p: w for p, w in handed.items() if p != "pos"}
            child = self._build(kind, cid, f"{name}.{cid}", ipath, variant, dim_in, self._hand(given, f"{name}.{cid}"))
            if child.dim != dim_in:
                raise TensorcadError(bpath, f"the block maps width {dim_in} to {child.dim}; a stack needs them equal")
            children.append(child)
        node = self._leaf("stack", id, name, path, params, dim_in, dim_in, handed.values())
        # repetition i runs block i mod n; when n does not divide repeat the last cycle is cut short (Gemma 3's
        # 26 layers, five local then one global), and each block says how many repetitions run it
        runs = [len(range(i, params["repeat"], len(children))) for i in range(len(children))]
        if len(set(runs)) == 1:
            return replace(node, children=tuple(children), repeat=runs[0])
        return replace(node, children=tuple(replace(c, repeat=k) for c, k in zip(children, runs)), repeat=1)


