"""The generated stateful mixers, held to a reference written here: each document run alone
from zero state, token by token.

Each mixer class of a generated model (ShortConv, SSM, LinearAttention, with and without
the delta rule) runs on packed rows: one-token documents, documents longer than the
convolution's kernel and the scan's chunk, and a document filling its row. The reference
below computes the same layer as its paper writes it, a loop over the tokens of one
document at a time, with nothing of the generated runtime (no chunks, no masks): a reset
that leaks, a chunk boundary dropped or a tap reaching back a document apart would each
show. Then the FLOPs: FlopCounterMode on each mixer module equals the analysis's
projections and mixing (`analysis.mixers`). The compiled form (torch.compile of the same
modules, one a kind) is held to the same reference under ``-m slow``.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tensorcad  # noqa: E402
from tensorcad.analysis.mixers import mixing_flops, shape, state_numbers  # noqa: E402
from tensorcad.runtime import build  # noqa: E402

TOLERANCE = 1e-5
KERNEL, CHUNK = 4, 8
LENGTHS = [[1, 6, 1, 11, 13], [32]]  # one-token documents, longer than the kernel and the chunk; a full row
DIM = 32

VARIANTS = {
    "short_conv": ("short_conv", {"kernel": KERNEL, "bias": True}),
    "ssm": ("ssm", {"heads": 4, "head_dim": 8, "state": 6, "groups": 2, "kernel": KERNEL, "chunk": CHUNK,
                    "bias": True}),
    "gated_deltanet": ("linear_attention", {"heads": 4, "k_heads": 2, "head_dim": 8, "value_dim": 6,
                                            "kernel": KERNEL, "chunk": CHUNK}),
    "gated_linear_attention": ("linear_attention", {"heads": 2, "head_dim": 8, "kernel": KERNEL, "chunk": CHUNK,
                                                    "delta": False}),
}


def design_of(kind: str, params: dict, doc: bool = True) -> dict:
    stack_in = {"x": "embed", **({"doc": "documents"} if doc else {})}
    return {
        "name": f"one-{kind}", "context": 64,
        "inputs": {"ids": {"role": "tokens"}, "documents": {"role": "documents"}},
        "nodes": [
            {"id": "embed", "kind": "embedding", "in": {"x": "ids"}, "params": {"vocab": 50, "dim": DIM}},
            {"id": "layers", "kind": "stack", "in": stack_in, "params": {"repeat": 1, "block": {
                "kind": "mixer_block", "params": {"mixer": {"kind": kind, "params": params}}}}},
            {"id": "norm", "kind": "rmsnorm", "in": {"x": "layers"}},
            {"id": "head", "kind": "linear", "in": {"x": "norm"}, "params": {"out": 50}},
        ],
        "output": "head",
    }


def mixer_of(name: str, doc: bool = True):
    """The generated mixer module, its weights moved off their init so every part matters."""
    kind, params = VARIANTS[name]
    design = tensorcad.load(design_of(kind, params, doc))
    model = build(design, form="eager", seed=1)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.15 * torch.randn(p.shape, generator=g))
    return model.layers[0].mixer, design.nodes[1].children[0].child("mixer")


def packed_rows():
    documents = torch.tensor([sum(([d] * n for d, n in enumerate(row)), []) for row in LENGTHS])
    x = torch.randn(len(LENGTHS), documents.shape[1], DIM, generator=torch.Generator().manual_seed(3))
    return x, documents


# --- the reference: one document, token by token ---------------------------------------------


def conv_reference(u, weight, bias):
    """(T, C): y_t = sum_j w_j u_(t-K+1+j), nothing before the document's first token."""
    T, K = u.shape[0], weight.shape[-1]
    y = torch.zeros_like(u)
    for t in range(T):
        for j in range(K):
            s = t - K + 1 + j
            if s >= 0:
                y[t] += weight[:, 0, j] * u[s]
    return y if bias is None else y + bias


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def short_conv_alone(m, x):
    b, c, h = m.in_proj(x).chunk(3, dim=-1)
    return m.out_proj(c * conv_reference(b * h, m.conv_weight, m.conv_bias))


def ssm_alone(m, x):
    H, P, G, N = m.heads, m.head_dim, m.groups, m.state
    z, xbc, dt = m.in_proj(x).split([H * P, m.channels, H], dim=-1)
    u, b, c = F.silu(conv_reference(xbc, m.conv_weight, m.conv_bias)).split([H * P, G * N, G * N], dim=-1)
    dt = F.softplus(dt + m.dt_bias)
    A = -torch.exp(m.A_log)
    y = x.new_zeros(x.shape[0], H, P)
    for h in range(H):
        g = h // (H // G)  # the group whose B and C head h reads
        S = x.new_zeros(P, N)
        for t in range(x.shape[0]):
            ut, bt, ct = u[t, h * P:(h + 1) * P], b[t, g * N:(g + 1) * N], c[t, g * N:(g + 1) * N]
            S = torch.exp(dt[t, h] * A[h]) * S + dt[t, h] * torch.outer(ut, bt)
            y[t, h] = S @ ct + m.D[h] * ut
    y = y.reshape(x.shape[0], H * P) * F.silu(z)
    grouped = rms(y.view(-1, G, H * P // G), m.norm.eps).view(-1, H * P)
    return m.out_proj(m.norm.weight * grouped)


def linear_attention_alone(m, x, delta):
    H, Hk, K, V = m.heads, m.k_heads, m.head_dim, m.value_dim
    qkv = torch.cat((m.q(x), m.k(x), m.v(x)), dim=-1)
    q, k, v = F.silu(conv_reference(qkv, m.conv_weight, None)).split([Hk * K, Hk * K, H * V], dim=-1)
    g = -torch.exp(m.A_log) * F.softplus(m.a(x) + m.dt_bias)
    beta = torch.sigmoid(m.b(x)) if delta else None
    out = x.new_zeros(x.shape[0], H, V)
    for h in range(H):
        kh = h // (H // Hk)  # the query/key head value head h is served by
        S = x.new_zeros(K, V)
        for t in range(x.shape[0]):
            qt = F.normalize(q[t, kh * K:(kh + 1) * K], dim=-1) / math.sqrt(K)
            kt = F.normalize(k[t, kh * K:(kh + 1) * K], dim=-1)
            vt = v[t, h * V:(h + 1) * V]
            S = torch.exp(g[t, h]) * S
            if delta:  # the delta rule: correct what S already predicts for k
                S = S + beta[t, h] * torch.outer(kt, vt - kt @ S)
            else:
                S = S + torch.outer(kt, vt)
            out[t, h] = qt @ S
    z = m.z(x).view(-1, H, V)
    return m.o((m.norm.weight * rms(out, m.norm.eps) * F.silu(z)).reshape(x.shape[0], H * V))


def alone(name, m, x):
    if name == "short_conv":
        return short_conv_alone(m, x)
    if name == "ssm":
        return ssm_alone(m, x)
    return linear_attention_alone(m, x, delta=name == "gated_deltanet")


def reference(name, m, x, documents):
    """Each document of each row run alone from zero state, put back in its place."""
    out = torch.zeros_like(x)
    for r, row in enumerate(LENGTHS):
        start = 0
        for n in row:
            out[r, start:start + n] = alone(name, m, x[r, start:start + n])
            start += n
    return out


@pytest.mark.parametrize("name", VARIANTS)
def test_the_eager_form_equals_each_document_alone(name):
    m, _ = mixer_of(name)
    x, documents = packed_rows()
    with torch.no_grad():
        got = m(x, documents)
        want = reference(name, m, x, documents)
    assert want.abs().max() > 0.1  # large enough for 1e-5 to mean something
    assert (got - want).abs().max() <= TOLERANCE


@pytest.mark.parametrize("name", VARIANTS)
def test_without_its_reset_the_next_document_starts_from_the_last(name):
    # The comparison can fail: the same weights reading no documents carry state across them.
    m, _ = mixer_of(name, doc=False)
    x, documents = packed_rows()
    with torch.no_grad():
        got = m(x)
        want = reference(name, m, x, documents)
        assert (got[1] - want[1]).abs().max() <= TOLERANCE  # a document filling its row: nothing to cross
        assert (got[0] - want[0]).abs().max() > 1e-3


@pytest.mark.parametrize("name", VARIANTS)
def test_flops_are_what_flop_counter_mode_counts(name):
    from torch.utils.flop_counter import FlopCounterMode

    m, node = mixer_of(name)
    x, documents = packed_rows()
    tokens = x.shape[0] * x.shape[1]
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        m(x, documents)
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    assert counts.pop("aten.addmm", 0) + counts.pop("aten.mm", 0) == 2 * shape(node).projections * tokens
    assert counts == {"aten.bmm": round(mixing_flops(node, x.shape[1]) * tokens)}


def test_the_scan_pads_the_last_chunk_and_counts_it():
    # 30 tokens in chunks of 8: four chunks, 32 positions computed, a real token pays 32 / 30 of them
    from torch.utils.flop_counter import FlopCounterMode

    m, node = mixer_of("ssm")
    x, documents = packed_rows()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        m(x[:, :30], documents[:, :30])
    taps = 2 * KERNEL * (4 * 8 + 2 * 2 * 6)
    assert counter.get_flop_counts()["Global"][torch.ops.aten.bmm] == round(mixing_flops(node, 30) * 60)
    assert mixing_flops(node, 30) - taps == pytest.approx((mixing_flops(node, 32) - taps) * 32 / 30)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["short_conv", "ssm", "gated_deltanet"])  # one a kind: ~10 s of compiling each
def test_the_compiled_form_equals_each_document_alone(name):
    m, _ = mixer_of(name)
    x, documents = packed_rows()
    with torch.no_grad():
        got = torch.compile(m)(x, documents)
        assert (got - reference(name, m, x, documents)).abs().max() <= TOLERANCE


@pytest.mark.parametrize("name", VARIANTS)
def test_parameters_and_state_are_what_the_generated_module_holds(name):
    # the analysis's counts against the module's own tensors: its parameters, and what a stream
    # must keep to go on token by token (the reference above: the conv's last K - 1 inputs, each S)
    m, node = mixer_of(name)
    assert sum(p.numel() for p in m.parameters()) == shape(node).total
    carried = (KERNEL - 1) * m.conv_weight.shape[0]
    if name == "ssm":
        carried += m.heads * m.head_dim * m.state
    elif name != "short_conv":
        carried += m.heads * m.head_dim * m.value_dim
    assert state_numbers(node) == carried
