"""The stateful mixers' runtime, as source text pasted into a generated module (like `prelude`).

A design with a short convolution, a state-space scan or linear attention gets these
three functions: `causal_conv` (a depthwise causal convolution whose taps never reach
into an earlier document), `chunked_scan` (each head's state carried along the row,
chunk by chunk, zero at each document's first token) and `_solve_unit_lower` (the
delta rule's triangular solve, in matmuls). Plain torch, so the eager model is the
readable one and `torch.compile(model)` compiles the same code; every contraction is
a matmul FlopCounterMode counts, as `analysis.cost` counts it. Nothing here imports torch.

The contract with the generator (names the generated classes call):

- `causal_conv(x, weight, bias=None, documents=None)`: (B, T, C) -> (B, T, C), weight (C, 1, K)
- `chunked_scan(q, k, v, log_decay, documents=None, chunk=64, beta=None)`: (B, H, T, K),
  (B, H, T, K), (B, H, T, V), (B, H, T) -> (B, H, T, V); beta (B, H, T) for the delta rule
"""

from __future__ import annotations

MIXER_RUNTIME = '''

# ---------------------------------------------------------------------------
# Mixer runtime: state carried along the row, reset at each document's start
#
# A short convolution reads each token's K - 1 predecessors; a scan carries each
# head's state matrix from position to position. Documents packed into one row
# must share neither, so both take the row's documents (B, T): a tap reaching
# into an earlier document reads zero, and the state is zero at each
# document's first token, exactly as when each document runs alone. Plain
# torch: torch.compile(model) compiles it as it stands.
# ---------------------------------------------------------------------------


def causal_conv(x, weight, bias=None, documents=None):
    """Depthwise causal convolution along T: (B, T, C) -> (B, T, C).

    weight (C, 1, K), as nn.Conv1d holds it: y_t = sum_j weight[:, 0, j] * x_(t-K+1+j),
    taps before the row's start reading zero. With documents (B, T), so does a
    tap reaching into an earlier document.
    """
    B, T, C = x.shape
    K = weight.shape[-1]
    taps = F.pad(x, (0, 0, K - 1, 0)).unfold(1, K, 1)  # (B, T, C, K): x_(t-K+1) .. x_t
    if documents is not None:
        before = (documents[:, :1] - 1).expand(B, K - 1)  # no document of the row
        tapped = torch.cat((before, documents), dim=1).unfold(1, K, 1)  # (B, T, K)
        same = (tapped == documents.unsqueeze(-1)).unsqueeze(2)  # (B, T, 1, K)
        taps = taps * same.to(taps.dtype)
    y = torch.einsum("btck,ck->btc", taps, weight[:, 0])  # (B, T, C)
    return y if bias is None else y + bias


def _solve_unit_lower(A, B):
    """X with (I + A) X = B, A strictly lower triangular (..., L, L), B (..., L, N).

    By halves: the top half first, then the bottom half's B less A's lower-left
    block @ X_top, each half solved the same way, so all of it is matmuls.
    """
    L = A.shape[-1]
    if L == 1:
        return B
    h = L // 2
    top = _solve_unit_lower(A[..., :h, :h], B[..., :h, :])
    bottom = B[..., h:, :] - A[..., h:, :h] @ top
    return torch.cat((top, _solve_unit_lower(A[..., h:, h:], bottom)), dim=-2)


def chunked_scan(q, k, v, log_decay, documents=None, chunk=64, beta=None):
    """Each head's state S (K x V) carried along the row -> outputs (B, H, T, V).

    q, k (B, H, T, K), v (B, H, T, V), log_decay (B, H, T), at most 0:
    S_t = exp(a_t) S_(t-1) + k_t v_t^T, or with beta (B, H, T) the delta rule,
    S_t = exp(a_t) (I - beta_t k_t k_t^T) S_(t-1) + beta_t k_t v_t^T; out_t = S_t^T q_t.
    (Mamba-2's scan is the first with q = C, k = B, v = dt x, a = dt A.) The row
    is cut into chunks: within one, every pair s <= t is scored at once; between
    them, S is carried. With documents (B, T), S is zero at each document's
    first token: no pair crosses a document, and the state carried into a
    chunk reaches only the positions of the document it came from.
    """
    B, H, T, K = q.shape
    V = v.shape[-1]
    L = chunk
    pad = -T % L  # whole chunks: zero inputs after the row's end, in its last document
    if documents is None:
        documents = torch.zeros(B, T, dtype=torch.long, device=q.device)
    q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    documents = torch.cat((documents, documents[:, -1:].expand(B, pad)), dim=1)
    n = (T + pad) // L
    q, k, v = (t.reshape(B, H, n, L, -1) for t in (q, k, v))
    docs = documents.reshape(B, 1, n, L)
    steps = F.pad(log_decay, (0, pad)).reshape(B, H, n, L)
    a = steps.cumsum(-1)  # (B, H, n, L): the log decay since the chunk began
    # the log decay from s to t, summed over s < r <= t only: never a step of another
    # document, so not even its rounding reaches this one (a_t - a_s would add it)
    later = torch.ones(L, L, dtype=torch.bool, device=q.device).tril(-1)
    spans = steps.unsqueeze(-1).expand(B, H, n, L, L).masked_fill(~later, 0).cumsum(-2)
    # the incoming state belongs to the last document of the chunk before
    before = torch.cat((docs[:, :, :1, :1] - 1, docs[:, :, :-1, -1:]), dim=2)
    carried = (docs == before).to(q.dtype)  # (B, 1, n, L): positions it reaches
    causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    pairs = (docs.unsqueeze(-1) == docs.unsqueeze(-2)) & causal  # s <= t, one document
    decay = spans.masked_fill(~pairs, float("-inf")).exp()  # (B, H, n, L, L): s -> t
    scores = (q @ k.transpose(-1, -2)) * decay  # s's weight at t
    read = q * (a.exp() * carried).unsqueeze(-1)  # q reading the incoming state
    # s -> the chunk's end, for s in the chunk's last document: k as it reaches the end
    write = k * decay[..., -1, :].unsqueeze(-1)
    kept = a[..., -1].exp() * carried[..., -1]  # (B, H, n): the incoming state's share
    if beta is None:
        values, corrections = v, None
    else:
        beta = F.pad(beta, (0, pad)).reshape(B, H, n, L, 1)
        # the delta rule within a chunk: (I + A) [u, w] = beta [v, k exp(a)]
        system = ((k * beta) @ k.transpose(-1, -2) * decay).tril(-1)
        reach = (a.exp() * carried).unsqueeze(-1)
        solved = _solve_unit_lower(system, torch.cat((v * beta, k * beta * reach), -1))
        values, corrections = solved[..., :V], solved[..., V:]
    state = q.new_zeros(B, H, K, V)
    out = []
    for c in range(n):
        new = values[:, :, c]  # (B, H, L, V)
        if corrections is not None:
            new = new - corrections[:, :, c] @ state  # less what the state predicts
        out.append(read[:, :, c] @ state + scores[:, :, c] @ new)
        state = state * kept[:, :, c, None, None]
        state = state + write[:, :, c].transpose(-1, -2) @ new
    return torch.stack(out, dim=2).reshape(B, H, n * L, V)[:, :, :T]
'''
