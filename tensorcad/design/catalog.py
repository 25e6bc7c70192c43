"""The catalog of kinds: ports, params with defaults and prose, and how each counts.

This table is the single source of `tensorcad catalog` and `docs/catalog.md`.
"""

from __future__ import annotations

from .schema import MAX_REPEAT, MAX_VOCAB, MAX_WIDTH, Kind, Param, Port

ROLES = ("tokens", "documents", "positions")

_X = Port("x", "the stream of hidden states (B, T, dim) it transforms")
_POS = Port(
    "pos",
    "positions (B, T), restarting per document; without it, the index 0..T-1",
    required=False,
    role="positions",
)

# A stateful mixer's documents: what resets its state (design/mixers.py asks of the wire).
_DOC = Port(
    "doc",
    "the document of each position (B, T); its state resets at each document's first token. "
    "Without it, state carries from one packed document into the next",
    required=False,
    role="documents",
)

_ATTENTION_PARAMS = (
    Param("heads", "int", "query heads", low=1, high=4096),
    Param("kv_heads", "int", "key/value heads (grouped-query attention); divides heads; default heads", None, 1, 4096),
    Param("head_dim", "int", "width of one head; default dim / heads", None, 1, 4096),
    Param("causal", "bool", "keep only keys at or before the query (q >= kv)", True),
    Param("window", "int", "keep the W keys nearest the query, itself included (q - kv < W)", None, 1, 1 << 24, nullable=True),
    Param("mask", "expr", "boolean expression of b, h, q, kv and port reads such as doc(b, q) == doc(b, kv); ANDed with causal and window", None, nullable=True),
    Param("score", "expr", "numeric expression rewriting each score, e.g. score + bias(bucket(kv - q), h), "
          "or Gemma 2's soft cap tanh(score * 0.02) * 50.0", None, nullable=True),
    Param("scale", "float", "multiplies q . k before the score expression; default 1 / sqrt(head_dim)", None, 1e-6, 1e6,
          nullable=True),
    Param("value_dim", "int", "width of one head's value, and of its output; default head_dim (DeepSeek-V3's "
          "v_head_dim 128 beside q/k heads of 192)", None, 1, 4096, nullable=True),
)

_GQA_PARAMS = _ATTENTION_PARAMS + (
    Param("rope", "object", "rotary positions {theta, scaling, rotary_dim, interleaved} (the rope kind's params); "
          "null for none", None, nullable=True),
    Param("bias", "bool", "biases on the q, k, v and output projections", False),
    Param("qkv_bias", "bool", "biases on the q, k and v projections only (Qwen2); default: as bias", None, nullable=True),
    Param("qk_norm", "object", "RMSNorm of q and k before the rotation {eps, offset, scope}: scope 'head' (default) "
          "normalises each head's features with one scale shared by every head (Qwen3; Gemma 3 with offset 1), 'all' "
          "the whole projection at once (OLMo 2); null for none", None, nullable=True),
    Param("latent", "object", "multi-head latent attention (DeepSeek-V2/V3) {q_rank, kv_rank, rope_dim, eps}: q "
          "from a rank-q_rank latent (x -> q_rank, RMSNorm, -> heads x head_dim; q_rank null: one projection), "
          "each head's key and value from one rank-kv_rank latent (x -> kv_rank + rope_dim, RMSNorm of the "
          "kv_rank part, -> heads x (head_dim - rope_dim + value_dim)); the last rope_dim features of a q/k head "
          "rotate, the key's shared by every head, the rest do not. A cache holds kv_rank + rope_dim numbers a "
          "token a layer. Needs kv_heads = heads; null for none", None, nullable=True),
)

# The params of a gqa_attention's `latent` object (not a kind of its own: it lives inside one attention).
LATENT = Kind(
    "latent",
    "multi-head latent attention's low-rank projections (DeepSeek-V2 section 2.1)",
    (),
    (
        Param("q_rank", "int", "rank of q's latent (DeepSeek-V3's q_lora_rank 1,536); null: q is one projection",
              None, 1, MAX_WIDTH, nullable=True),
        Param("kv_rank", "int", "rank of the key/value latent (kv_lora_rank 512)", low=1, high=MAX_WIDTH),
        Param("rope_dim", "int", "rotated features of each q/k head (qk_rope_head_dim 64), the key's shared by "
              "every head", low=2, high=4096),
        Param("eps", "float", "the latents' RMSNorm epsilon", 1e-6, 0, 1),
    ),
)

_MLP_PARAMS = (
    Param("hidden", "int", "inner width", low=1, high=MAX_WIDTH),
    Param("activation", "enum", "swiglu / geglu (three matrices, a SiLU or tanh-GELU gate) or gelu / gelu_tanh "
          "(GPT-2's tanh approximation) / relu (two)", "swiglu", choices=("swiglu", "geglu", "gelu", "gelu_tanh", "relu")),
    Param("bias", "bool", "biases on the projections", False),
)

# Mixture of experts (issue 44): a router picks top_k of `experts` MLPs for each token; shared experts take
# every token. Names follow Megatron-LM's (moe_router_topk, moe_expert_capacity_factor, moe_token_drop_policy,
# moe_aux_loss_coeff, moe_z_loss_coeff, moe_router_bias_update_rate) and transformers' (norm_topk_prob,
# routed_scaling_factor, e_score_correction_bias, shared_expert_gate) where they say the same thing.
_MOE = Kind(
    "moe",
    "A mixture of experts in place of a block's mlp: a router scores each token against every routed expert "
    "(softmax or sigmoid of x . w_e), the top_k experts run on it and their outputs are summed with those "
    "weights; shared experts run on every token. With a capacity factor an expert takes a bounded number of "
    "tokens of its group and drops the rest (the token passes by the residual alone); without one it is dropless.",
    (_X,),
    (
        Param("experts", "int", "routed experts", low=1, high=4096),
        Param("top_k", "int", "experts each token is routed to; at most experts", low=1, high=4096),
        Param("hidden", "int", "each routed expert's inner width (moe_intermediate_size)", low=1, high=MAX_WIDTH),
        Param("activation", "enum", "each expert's activation, as an mlp's", "swiglu",
              choices=("swiglu", "geglu", "gelu", "gelu_tanh", "relu")),
        Param("bias", "bool", "biases on the experts' projections", False),
        Param("router", "enum", "the score of each expert: softmax over the experts (Mixtral, Qwen-MoE, OLMoE) or "
              "an independent sigmoid (DeepSeek-V3)", "softmax", choices=("softmax", "sigmoid")),
        Param("normalize", "bool", "divide the top_k weights by their sum (Mixtral; Qwen3-MoE's norm_topk_prob); "
              "false keeps the scores as they are (Qwen2-MoE, OLMoE)", True),
        Param("router_bias", "bool", "a learned score-correction bias added to the scores to choose the experts, "
              "not to weight them (DeepSeek-V3's e_score_correction_bias)", False),
        Param("routed_scale", "float", "multiplies the routed experts' weighted sum (DeepSeek-V3's "
              "routed_scaling_factor 2.5)", 1.0, 1e-6, 1e6),
        Param("shared", "object", "the shared experts every token runs through, as one mlp's params {hidden, "
              "activation, bias} (hidden = shared experts x their width); null for none", None, nullable=True),
        Param("shared_gate", "bool", "the shared experts' output multiplied by sigmoid(x . g), g a learned "
              "vector of dim (Qwen2-MoE's shared_expert_gate)", False),
        Param("capacity", "float", "capacity factor: an expert takes at most ceil(capacity x group tokens x top_k "
              "/ experts) tokens of its group (Switch; moe_expert_capacity_factor); null: dropless", None, 0.01,
              1e4, nullable=True),
        Param("drop", "enum", "which routed tokens past an expert's capacity are dropped (moe_token_drop_policy): "
              "'none' (dropless; capacity null), 'position' the later tokens of the group, 'probs' those of the "
              "lowest score", "none", choices=("none", "position", "probs")),
        Param("capacity_scope", "enum", "the group a capacity counts: 'row', each row of the batch (Switch "
              "Transformers), or 'batch', every token of the micro-batch (NLLB-MoE, Megatron's "
              "token dispatcher)", "row", choices=("row", "batch")),
        Param("aux_loss", "float", "coefficient of the load-balancing loss experts x sum_e f_e P_e, f_e the share "
              "of routed tokens sent to expert e and P_e its mean score (Switch eq. 4; moe_aux_loss_coeff); 0: none",
              0.0, 0, 1e3),
        Param("aux_scope", "enum", "the tokens f and P are averaged over: 'micro_batch', 'global_batch' (across "
              "micro-batches and data-parallel ranks, Megatron's global_aux_loss) or 'sequence' (each sequence "
              "alone, then averaged: DeepSeek-V3's complementary sequence-wise loss)", "micro_batch",
              choices=("micro_batch", "global_batch", "sequence")),
        Param("z_loss", "float", "coefficient of the router z-loss mean(logsumexp(logits)^2) (ST-MoE eq. 5; "
              "moe_z_loss_coeff); 0: none", 0.0, 0, 1e3),
        Param("bias_update", "float", "auxiliary-loss-free balancing: after each step every correction bias moves "
              "by this rate, up for an expert under the mean load, down above it (DeepSeek-V3's gamma; "
              "moe_router_bias_update_rate); needs router_bias; null: none", None, 0, 1, nullable=True),
    ),
    counts="dim x experts router params, experts x an mlp's of hidden, and the shared mlp's; a token multiplies "
           "the router, top_k experts and the shared ones (its active params), 2 FLOPs each; the experts it "
           "skips are in total, not in active",
)

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "embedding",
            "Looks up a learned vector for each token id.",
            (Port("x", "token ids (B, T)", role="tokens"),),
            (
                Param("vocab", "int", "number of token ids", low=1, high=MAX_VOCAB),
                Param("dim", "int", "width of each vector", low=1, high=MAX_WIDTH),
                Param("scale", "float", "multiplies every vector looked up (Gemma: sqrt(dim)); null for none", None,
                      1e-6, 1e6, nullable=True),
            ),
            counts="vocab x dim params (embedding); no FLOPs: a lookup multiplies nothing",
        ),
        Kind(
            "pos_embedding",
            "Adds a learned vector for each position; reads positions when `pos` is wired.",
            (_X, Port("pos", "positions (B, T); without it, the index 0..T-1", required=False, role="positions")),
            (Param("context", "int", "number of positions in the table", low=1, high=1 << 24),),
            counts="context x dim params (embedding); no FLOPs",
        ),
        Kind(
            "linear",
            "A learned projection to `out` features.",
            (_X,),
            (
                Param("out", "int", "output width", low=1, high=MAX_VOCAB),
                Param("bias", "bool", "add a learned bias", False),
                Param("tie", "ref", "id of an embedding whose table this projection reuses", None, nullable=True),
                Param("softcap", "float", "cap x tanh(out / cap) on its output (Gemma 2's logits); null for none", None,
                      1e-6, 1e6, nullable=True),
                Param("scale", "float", "multiplies its output (Granite's logits: 1 / logits_scaling; Cohere's: "
                      "logit_scale); null for none", None, 1e-6, 1e6, nullable=True),
            ),
            counts="in x out matmul params (counted once when tied); 2 FLOPs per param per token",
        ),
        Kind("rmsnorm", "Root-mean-square normalisation with a learned scale.", (_X,),
             (Param("eps", "float", "added to the mean square", 1e-5, 0, 1),
              Param("offset", "float", "the scale is offset + weight, the weight starting at 1 - offset "
                    "(Gemma: 1)", 0.0, 0, 1)),
             counts="dim params; FLOPs not counted"),
        Kind("layernorm", "Layer normalisation with a learned scale and bias.", (_X,),
             (Param("eps", "float", "added to the variance", 1e-5, 0, 1),
              Param("bias", "bool", "a learned bias after the scale (Cohere's has none)", True)),
             counts="2 x dim params (dim without bias); FLOPs not counted"),
        Kind("mlp", "The feed-forward network of a block.", (_X,), _MLP_PARAMS,
             counts="2 or 3 (swiglu) x dim x hidden matmul params"),
        _MOE,
        Kind(
            "rope",
            "Rotates pairs of features of each head by an angle proportional to position.",
            (_X, _POS),
            (
                Param("theta", "float", "base of the rotation frequencies", 10000.0, 1, 1e12),
                Param("head_dim", "int", "width of one head", low=2, high=4096),
                Param("scaling", "object", "how the frequencies are stretched past the trained context {type, ...}: "
                      "linear {factor}, dynamic {factor, original_context}, llama3 {factor, low_freq_factor, "
                      "high_freq_factor, original_context}, yarn {factor, original_context, beta_fast 32, beta_slow 1, "
                      "attention_factor, mscale, mscale_all_dim, truncate true}, longrope {short_factor, long_factor, "
                      "factor, original_context, attention_factor}; changes no param and no FLOP; null for none", None,
                      nullable=True),
                Param("rotary_dim", "int", "features of each head rotated, the first ones (StableLM: a quarter, "
                      "Bamba: half; transformers' partial_rotary_factor x head_dim); default head_dim", None, 2, 4096,
                      nullable=True),
                Param("interleaved", "bool", "rotate adjacent pairs (2i, 2i+1) instead of the two halves (Cohere)",
                      False),
            ),
            counts="no params; FLOPs not counted (a scaling changes the angles only)",
        ),
        Kind(
            "sdpa",
            "Scaled dot-product attention over heads, with a mask and a score expression.",
            (Port("q", "queries (B, T, heads x head_dim)"), Port("k", "keys (B, T, kv_heads x head_dim)"),
             Port("v", "values (B, T, kv_heads x head_dim)")),
            _ATTENTION_PARAMS,
            extra_ports=True,
            extra_doc="any other port is a tensor its mask reads at (b, q) / (b, kv), or a table its score reads",
            counts="no params; 2 x keysPerQuery x (head_dim + value_dim) x heads FLOPs per token",
        ),
        Kind(
            "gqa_attention",
            "Grouped-query attention: q, k, v projections, rotary positions, sdpa, output projection.",
            (_X, _POS),
            _GQA_PARAMS,
            extra_ports=True,
            extra_doc="any other port is handed to its sdpa (documents for a mask, tables for a score)",
            counts="dim x head_dim x (2 heads + 2 kv_heads) matmul params, plus sdpa (and 2 x head_dim for q/k norms); "
                   "with a latent, its projections and two norms instead of q, k and v",
        ),
        Kind(
            "short_conv",
            "A gated causal depthwise convolution over the sequence (LFM2's short convolution): x is projected "
            "to gates b, c and values h, and out(c * conv(b * h)); each channel's last kernel - 1 inputs are "
            "its state.",
            (_X, _DOC),
            (
                Param("kernel", "int", "taps of the convolution, the current position included", 3, 1, 1024),
                Param("bias", "bool", "biases on the projections and the convolution", False),
            ),
            counts="4 x dim^2 matmul params (in 3 x dim, out dim) and kernel x dim taps; 2 x kernel x dim FLOPs "
                   "a token for the taps, whatever the document length; a state of (kernel - 1) x dim a sequence",
        ),
        Kind(
            "ssm",
            "Mamba-2's selective state-space mixer: x projected to a gate z, values, B, C and a step dt; a "
            "short causal convolution (SiLU) over values, B and C; each head's state h = exp(dt A) h + dt x "
            "B^T read by C in a chunked scan, plus D x; a gated RMSNorm; the out projection.",
            (_X, _DOC),
            (
                Param("heads", "int", "heads, each with its own decay A, skip D and step bias", low=1, high=4096),
                Param("head_dim", "int", "width of one head's values; heads x head_dim is the inner width "
                      "(Mamba-2's expand x dim)", 64, 1, 4096),
                Param("state", "int", "the state's width N (d_state): each head carries head_dim x N numbers",
                      128, 1, 4096),
                Param("groups", "int", "groups of heads sharing one B and C (n_groups); divides heads", 1, 1, 4096),
                Param("kernel", "int", "taps of the convolution over values, B and C", 4, 1, 1024),
                Param("chunk", "int", "positions a chunk of the scan: quadratic within a chunk, a recurrence "
                      "between chunks", 256, 1, 4096),
                Param("bias", "bool", "biases on the in and out projections", False),
                Param("conv_bias", "bool", "a bias on the convolution", True),
                Param("eps", "float", "the gated RMSNorm's epsilon", 1e-5, 0, 1),
            ),
            counts="dim x (2 heads x head_dim + 2 groups x state + heads) + heads x head_dim x dim matmul params, "
                   "taps and 3 x heads of its own; the scan's FLOPs a token depend on the chunk, not on the "
                   "document length; a state of heads x head_dim x state a sequence",
        ),
        Kind(
            "linear_attention",
            "Gated DeltaNet's linear attention: q, k, v (a short causal convolution, SiLU; q and k "
            "L2-normalised), each head's state S = exp(g) (I - beta k k^T) S + beta k v^T read by q in a "
            "chunked scan (the delta rule; without it S = exp(g) S + k v^T, gated linear attention); "
            "an RMSNorm gated by z; the out projection.",
            (_X, _DOC),
            (
                Param("heads", "int", "value heads, each with its own state", low=1, high=4096),
                Param("k_heads", "int", "query/key heads, each serving heads / k_heads value heads; default heads",
                      None, 1, 4096),
                Param("head_dim", "int", "width of one query/key head; default dim / heads", None, 1, 4096),
                Param("value_dim", "int", "width of one value head; default head_dim", None, 1, 4096),
                Param("kernel", "int", "taps of the convolution over q, k and v", 4, 1, 1024),
                Param("chunk", "int", "positions a chunk of the scan", 64, 1, 4096),
                Param("delta", "bool", "the delta rule (Gated DeltaNet); false: gated linear attention", True),
                Param("eps", "float", "the gated RMSNorm's epsilon", 1e-6, 0, 1),
            ),
            counts="dim x (2 k_heads x head_dim + 2 heads x value_dim + 2 heads) + heads x value_dim x dim matmul "
                   "params, taps and 2 x heads of its own; the scan's FLOPs a token depend on the chunk, not on "
                   "the document length; a state of heads x head_dim x value_dim a sequence",
        ),
        Kind(
            "transformer_block",
            "A pre-norm residual block: x + attention(norm(x)), then + mlp(norm(x)) (post_norms: x + norm(attention(norm(x))), ...).",
            (_X,),
            (
                Param("dim", "int", "width of the residual stream; default the input's", None, 1, MAX_WIDTH),
                Param("norm", "enum", "the normalisation before each half", "rmsnorm", choices=("rmsnorm", "layernorm")),
                Param("eps", "float", "the norms' epsilon", 1e-5, 0, 1),
                Param("norm_offset", "float", "the rmsnorms' offset (see rmsnorm)", 0.0, 0, 1),
                Param("norm_bias", "bool", "the layernorms' bias (see layernorm)", True),
                Param("post_norms", "bool", "a norm after the attention and after the mlp too, before each residual add "
                      "(Gemma 2)", False),
                Param("pre_norms", "bool", "the norm before each half; false with post_norms: x + norm(attention(x)) "
                      "(OLMo 2)", True),
                Param("parallel", "bool", "attention and mlp side by side on one norm: x + attention(norm(x)) + "
                      "mlp(norm(x)) (Cohere, StableLM's parallel residual)", False),
                Param("residual_scale", "float", "multiplies each half's output before its residual add (Granite); "
                      "null for none", None, 1e-6, 1e6, nullable=True),
                Param("attention", "object", "a gqa_attention's params"),
                Param("mlp", "object", "an mlp's params, or {\"kind\": \"moe\", ...} a moe's params in its place"),
            ),
            extra_ports=True,
            extra_doc="any other port (doc, pos, a table) is handed down to its attention by name",
            counts="its attention's and mlp's, plus its norms (two; four with post_norms; one when parallel)",
        ),
        Kind(
            "mixer_block",
            "A pre-norm residual block around a stateful token mixer: x + mixer(norm(x)), then + mlp(norm(x)) "
            "when it has an mlp (Mamba-2's blocks have none).",
            (_X,),
            (
                Param("dim", "int", "width of the residual stream; default the input's", None, 1, MAX_WIDTH),
                Param("norm", "enum", "the normalisation before each half", "rmsnorm", choices=("rmsnorm", "layernorm")),
                Param("eps", "float", "the norms' epsilon", 1e-5, 0, 1),
                Param("mixer", "object", "the mixer: {kind, params}, kind one of short_conv, ssm, linear_attention"),
                Param("mlp", "object", "an mlp's params; null for none", None, nullable=True),
            ),
            extra_ports=True,
            extra_doc="any other port (doc) is handed down to its mixer by name",
            counts="its mixer's and mlp's, plus a norm each",
        ),
        Kind(
            "stack",
            "Repeats a block, feeding each repetition's output to the next.",
            (_X,),
            (
                Param("repeat", "int", "number of repetitions", low=1, high=MAX_REPEAT),
                Param("block", "object", "the block repeated: {kind, params}; null when blocks and layers say it",
                      None, nullable=True),
                Param("blocks", "object", "named blocks for a hybrid stack: {name: {kind, params}}, with layers", None,
                      nullable=True),
                Param("layers", "names", "the blocks' names taken in turn, repetition i the (i mod n)th (LFM2's "
                      "layer_types; [\"ssm\", ..., \"attention\"] for a 7:1 hybrid); divides repeat", None,
                      nullable=True),
                Param("windows", "windows", "attention windows taken in turn, repetition i the (i mod n)th, null "
                      "for none (Gemma 2's [4096, null]); replaces the block's window; at most repeat of them, the "
                      "last cycle cut short when they do not divide it (Gemma 3's 26 layers)", None,
                      nullable=True),
                Param("ropes", "ropes", "attention ropes taken in turn as windows are, null for none (Gemma 3's local "
                      "and global bases, SmolLM3's layers without rope); replaces the block's rope; as many as "
                      "windows when both are given", None, nullable=True),
            ),
            extra_ports=True,
            extra_doc="any other port is handed to every repetition by name",
            counts="repeat x its block's",
        ),
        Kind(
            "table",
            "A learned tensor a score may read, e.g. T5's relative-position bias (buckets, heads).",
            (),
            (Param("shape", "shape", "its shape, 1 to 4 positive integers"),),
            counts="the product of its shape, params; no FLOPs counted",
        ),
    )
}


def catalog_text(kind: str | None = None) -> str:
    """Plain text of the catalog, or of one kind."""
    kinds = [KINDS[kind]] if kind else list(KINDS.values())
    out: list[str] = []
    for k in kinds:
        out.append(f"{k.name}: {k.doc}")
        out.append("  ports:")
        for p in k.ports:
            opt = "" if p.required else " (optional)"
            role = f" [role {p.role}]" if p.role else ""
            out.append(f"    {p.name}{opt}{role}: {p.doc}")
        if k.extra_ports:
            out.append(f"    ...: {k.extra_doc}")
        if not k.ports and not k.extra_ports:
            out.append("    (none)")
        out.append("  params:")
        for p in k.params:
            out.append(f"    {p.name} ({p.describe_type()}, default {p.describe_default()}): {p.doc}")
        out.append(f"  counts: {k.counts}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def catalog_markdown() -> str:
    """`docs/catalog.md`, generated from the same table (a test keeps them in sync)."""
    out = [
        "# The catalog of kinds",
        "",
        "Generated from `tensorcad/design/catalog.py` by `tensorcad catalog --markdown`; do not edit by hand.",
        "",
    ]
    for k in KINDS.values():
        out += [f"## `{k.name}`", "", k.doc, "", "| port | required | role | meaning |", "|---|---|---|---|"]
        for p in k.ports:
            out.append(f"| `{p.name}` | {'yes' if p.required else 'no'} | {p.role or ''} | {p.doc} |")
        if k.extra_ports:
            out.append(f"| *other* | no | | {k.extra_doc} |")
        out += ["", "| param | type | default | meaning |", "|---|---|---|---|"]
        for p in k.params:
            out.append(f"| `{p.name}` | {p.describe_type()} | {p.describe_default()} | {p.doc} |")
        out += ["", f"Counts: {k.counts}.", ""]
    return "\n".join(out)
