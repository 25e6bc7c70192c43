"""The generated module's attention and rotary runtime, run against real torch on CPU.

The prelude is source text; each test execs it into a fresh namespace, as a generated
module would hold it. FlexAttention itself (uncompiled, so no test waits on a compile)
is the oracle for the eager form; one slow test exercises the compiled path.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from tensorcad.codegen.runtime import prelude  # noqa: E402

IMPORTS, ATTENTION_RUNTIME, ROTARY_RUNTIME = (
    prelude.IMPORTS, prelude.ATTENTION_RUNTIME, prelude.ROTARY_RUNTIME
)

TRAINING_WARNING = "flex_attention has no backward on CPU"


def load_prelude(*, compile_: bool = False) -> dict:
    ns: dict = {}
    exec(compile(IMPORTS + ATTENTION_RUNTIME + ROTARY_RUNTIME, "<prelude>", "exec"), ns)
    ns["COMPILE"].update(flex_attention=compile_, create_block_mask=compile_)
    return ns


@pytest.fixture
def ns() -> dict:
    return load_prelude()


@pytest.fixture(autouse=True)
def quiet_uncompiled_flex():
    # torch warns once that uncompiled flex_attention is unfused; the tests mean it.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield


# --- masks and score mods in the shape the generator writes them ----------------------


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


causal.uses_batch = False
causal.uses_head = False


def sliding_window_64(b, h, q_idx, kv_idx):
    """Keeps the 64 keys up to and including the query."""
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 64)


def same_document(documents):
    """Keeps a key when it is in the query's document and not after it."""

    def same_document_causal(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (documents[b, q_idx] == documents[b, kv_idx])

    same_document_causal.reads = (documents,)
    return same_document_causal


def soft_cap_30(score, b, h, q_idx, kv_idx):
    return 30.0 * torch.tanh(score / 30.0)


def relative_bias(bias):
    """T5-style: a learned (buckets, H) table read at the clipped distance."""
    half = bias.shape[0] // 2

    def relative_bias_score(score, b, h, q_idx, kv_idx):
        bucket = torch.clamp(kv_idx - q_idx, -half, half - 1) + half
        return score + bias[bucket, h]

    relative_bias_score.reads = (bias,)
    return relative_bias_score


def documents_of(lengths_by_row: list[list[int]]) -> torch.Tensor:
    """(B, T) non-decreasing document ids from each row's document lengths."""
    rows = [
        torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
        for lengths in lengths_by_row
    ]
    return torch.stack(rows)


# Two rows packed differently; boundaries fall inside 128-token blocks and one row
# starts and ends mid-document as a window of a stream would.
T = 384
DOCUMENTS = documents_of([[100, 37, 150, 97], [5, 250, 1, 128]])


def qkv(B=2, H=4, H_kv=4, T=T, S=T, D=16, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g)
    k = torch.randn(B, H_kv, S, D, generator=g)
    v = torch.randn(B, H_kv, S, D, generator=g)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


# --- eager == flex ------------------------------------------------------------------


CASES = {
    "causal": dict(mask_mod=causal),
    "sliding-window": dict(mask_mod=sliding_window_64),
    "documents": dict(mask_mod=same_document(DOCUMENTS)),
    "soft-cap": dict(mask_mod=causal, score_mod=soft_cap_30),
    "no-mask": dict(),
}


@pytest.mark.parametrize("H_kv", [4, 2], ids=["mha", "gqa-4/2"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_eager_equals_flex(ns, case, H_kv):
    q, k, v = qkv(H_kv=H_kv)
    eager = ns["attend"](q, k, v, form="eager", **CASES[case])
    assert ns["RUNTIME_PATHS"]["attend"] == "eager"
    flex = ns["attend"](q, k, v, form="flex", **CASES[case])
    assert ns["RUNTIME_PATHS"] == {
        "attend": "flex", "flex_attention": "uncompiled",
        # these hand-written masks carry no `ranges`: create_block_mask builds theirs
        **({"block_mask": "create_block_mask", "create_block_mask": "eager"}
           if "mask_mod" in CASES[case] else {}),
    }
    torch.testing.assert_close(eager, flex, rtol=0, atol=1e-5)


def test_eager_equals_flex_gqa_8_over_2_documents_and_t5_bias(ns):
    q, k, v = qkv(H=8, H_kv=2, seed=1)
    bias = torch.randn(32, 8, generator=torch.Generator().manual_seed(2))
    mods = dict(mask_mod=same_document(DOCUMENTS), score_mod=relative_bias(bias))
    eager = ns["attend"](q, k, v, form="eager", **mods)
    flex = ns["attend"](q, k, v, form="flex", **mods)
    torch.testing.assert_close(eager, flex, rtol=0, atol=1e-5)


def test_eager_equals_sdpa_with_a_dense_mask(ns):
    # an oracle that shares no code with either form: PyTorch's own SDPA
    q, k, v = qkv(H=8, H_kv=2, seed=3)
    i = torch.arange(T)
    dense = (i[:, None] >= i[None, :]) & (DOCUMENTS[:, :, None] == DOCUMENTS[:, None, :])
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=dense[:, None], enable_gqa=True
    )
    eager = ns["attend"](q, k, v, form="eager", mask_mod=same_document(DOCUMENTS))
    torch.testing.assert_close(eager, sdpa, rtol=0, atol=1e-5)


def test_rows_that_keep_no_key_give_zero_in_both_forms(ns):
    def after_32(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (kv_idx >= 32)

    q, k, v = qkv(T=256, S=256, seed=4)
    for form in ("eager", "flex"):
        out = ns["attend"](q, k, v, form=form, mask_mod=after_32)
        assert torch.equal(out[:, :, :32], torch.zeros_like(out[:, :, :32])), form
        assert out[:, :, 32:].abs().sum() > 0


# --- the block mask, once a batch -------------------------------------------------------


def count_builds(ns) -> list:
    """The arguments of every create_block_mask call, compiled or not.

    Counted where _block_mask hands create_block_mask over, outside any compiled
    function, so counting cannot make torch.compile guard on the list and recompile.
    """
    calls = []
    real = ns["_run_compiled"]

    def counting_run_compiled(name, fn, fallback_path, *args, **kwargs):
        if name == "create_block_mask":
            calls.append((args, kwargs))
        return real(name, fn, fallback_path, *args, **kwargs)

    ns["_run_compiled"] = counting_run_compiled
    return calls


def forward_8_layers(ns, documents, q, k, v):
    # Each layer calls the factory anew, as a generated Attention.forward does,
    # so every layer hands _block_mask a new closure over the same documents.
    for _ in range(8):
        q = ns["attend"](q, k, v, form="flex", mask_mod=same_document(documents))
    return q


def test_block_mask_built_once_per_forward_pass_across_8_layers(ns):
    calls = count_builds(ns)
    q, k, v = qkv(H=2, H_kv=1, D=8, seed=5)  # small: this counts builds, not arithmetic
    forward_8_layers(ns, DOCUMENTS, q, k, v)
    assert len(calls) == 1
    # the real B: a mask that reads the documents differs by row
    assert calls[0][0][1:5] == (2, 2, T, T)

    forward_8_layers(ns, DOCUMENTS.clone(), q, k, v)  # the next batch: a new tensor
    assert len(calls) == 2

    documents = DOCUMENTS.clone()
    forward_8_layers(ns, documents, q, k, v)
    assert len(calls) == 3
    documents[0, 200:] += 1  # edited in place: same object, bumped _version
    forward_8_layers(ns, documents, q, k, v)
    assert len(calls) == 4
    assert len(ns["_BLOCK_MASKS"]) == 1


def test_masks_differing_only_in_a_captured_number_do_not_share(ns):
    def window_of(w):
        def sliding_window(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < w)

        sliding_window.uses_batch = sliding_window.uses_head = False
        return sliding_window

    builds = count_builds(ns)
    wide = ns["_block_mask"](window_of(512), 1, 1, 1024, 1024, "cpu")
    narrow = ns["_block_mask"](window_of(16), 1, 1, 1024, 1024, "cpu")
    assert len(builds) == 2
    assert narrow.to_dense().sum() < wide.to_dense().sum()
    assert ns["_block_mask"](window_of(16), 1, 1, 1024, 1024, "cpu") is narrow  # same number: shared


def test_inference_mode_documents_share_and_rebuild_alike(ns):
    # inference tensors keep no _version: an in-place edit must still rebuild
    calls = count_builds(ns)
    with torch.inference_mode():
        documents = DOCUMENTS.clone()
        for _ in range(8):
            ns["_block_mask"](same_document(documents), 2, 1, T, T, "cpu")
        assert len(calls) == 1
        documents[0, 200:] += 1
        ns["_block_mask"](same_document(documents), 2, 1, T, T, "cpu")
        ns["_block_mask"](same_document(documents), 2, 1, T, T, "cpu")
        assert len(calls) == 2
        q, k, v = qkv(seed=16)
        flex = ns["attend"](q, k, v, form="flex", mask_mod=same_document(documents))
        eager = ns["attend"](q, k, v, form="eager", mask_mod=same_document(documents))
    torch.testing.assert_close(eager, flex, rtol=0, atol=1e-5)


def test_rebuilt_block_mask_follows_the_edited_documents(ns):
    documents = DOCUMENTS.clone()
    q, k, v = qkv(seed=6)
    ns["attend"](q, k, v, form="flex", mask_mod=same_document(documents))
    documents[1, 10:] += 1  # row 1 now breaks at 10 as well
    flex = ns["attend"](q, k, v, form="flex", mask_mod=same_document(documents))
    eager = ns["attend"](q, k, v, form="eager", mask_mod=same_document(documents))
    torch.testing.assert_close(eager, flex, rtol=0, atol=1e-5)


def test_a_thousand_batches_leave_one_entry_per_mask(ns):
    # The cache's bookkeeping, with create_block_mask stubbed: the real one would
    # only make this slow, and the tests above hold what it builds.
    builds = []
    ns["create_block_mask"] = lambda *args, **kwargs: builds.append(args) or object()
    for step in range(1000):
        documents = torch.full((2, 256), step)
        for _ in range(4):
            ns["_block_mask"](same_document(documents), 2, 4, 256, 256, "cpu")
            ns["_block_mask"](causal, 2, 4, 256, 256, "cpu")
    assert sorted(ns["_BLOCK_MASKS"]) == ["causal", "same_document_causal"]
    assert len(builds) == 1000 + 1  # one per batch for the documents, once for causal


def test_block_mask_batch_and_heads_follow_the_attribute_protocol(ns):
    calls = count_builds(ns)
    ns["_block_mask"](causal, 2, 4, 256, 256, "cpu")  # uses_batch = uses_head = False
    ns["_block_mask"](sliding_window_64, 2, 4, 256, 256, "cpu")  # attributes absent: both used
    unmarked = same_document(DOCUMENTS[:, :256])
    unmarked.uses_batch = False  # reads a row's tensor, so B is needed whatever it says
    unmarked.uses_head = False
    ns["_block_mask"](unmarked, 2, 4, 256, 256, "cpu")
    assert [c[0][1:3] for c in calls] == [(None, None), (2, 4), (2, None)]


def test_block_mask_matches_the_mask_block_by_block(ns):
    # Independent of create_block_mask: a 128 x 128 block is computed when any
    # score in it is kept, counted here by evaluating every score.
    block_mask = ns["_block_mask"](same_document(DOCUMENTS), 2, 4, T, T, "cpu")
    i = torch.arange(T)
    dense = (i[:, None] >= i[None, :]) & (DOCUMENTS[:, :, None] == DOCUMENTS[:, None, :])
    blocks = dense.view(2, T // 128, 128, T // 128, 128).any(dim=(2, 4))  # (B, T/128, S/128)
    assert torch.equal(block_mask.to_dense()[:, 0].bool(), blocks)
    assert not torch.equal(blocks[0], blocks[1])  # the rows really differ


# --- isolation ----------------------------------------------------------------------


@pytest.mark.parametrize("form", ["eager", "flex"])
def test_changing_one_document_moves_no_other_output(ns, form):
    q, k, v = qkv(H=8, H_kv=2, seed=7)
    mask = same_document(DOCUMENTS)
    before = ns["attend"](q, k, v, form=form, mask_mod=mask)
    inside = DOCUMENTS == 2  # (B, T): document 2 of each row
    noise = qkv(H=8, H_kv=2, seed=8)
    q2, k2, v2 = (
        torch.where(inside[:, None, :, None], n, t) for t, n in zip((q, k, v), noise)
    )
    after = ns["attend"](q2, k2, v2, form=form, mask_mod=mask)
    outside = ~inside[:, None, :, None].expand_as(before)
    assert torch.equal(after[outside], before[outside])  # exactly 0 difference
    assert not torch.equal(after[~outside], before[~outside])  # and the edit was seen


# --- training on CPU ----------------------------------------------------------------


def test_training_with_flex_on_cpu_falls_back_to_eager_and_warns_once(ns):
    q, k, v = qkv(H=8, H_kv=2, seed=9, requires_grad=True)
    mask = same_document(DOCUMENTS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ns["attend"](q, k, v, form="flex", mask_mod=mask)
        ns["attend"](q, k, v, form="flex", mask_mod=mask)
    assert [str(w.message) for w in caught if TRAINING_WARNING in str(w.message)] == [
        "flex_attention has no backward on CPU; using the eager form for training"
    ]
    assert ns["RUNTIME_PATHS"]["attend"] == "eager-training-fallback"
    out.square().sum().backward()
    grads = [t.grad for t in (q, k, v)]
    assert all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)

    # the gradient is the eager form's own
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    ns["attend"](q2, k2, v2, form="eager", mask_mod=mask).square().sum().backward()
    for g, g2 in zip(grads, (q2.grad, k2.grad, v2.grad)):
        assert torch.equal(g, g2)

    with torch.no_grad():  # inference with flex still runs flex
        ns["attend"](*(t.detach() for t in (q, k, v)), form="flex", mask_mod=mask)
    assert ns["RUNTIME_PATHS"]["attend"] == "flex"


def test_a_learned_score_table_alone_triggers_the_fallback(ns):
    q, k, v = qkv(seed=10)
    bias = torch.zeros(32, 4, requires_grad=True)
    with pytest.warns(UserWarning, match=TRAINING_WARNING):
        out = ns["attend"](q, k, v, form="flex", mask_mod=causal, score_mod=relative_bias(bias))
    out.sum().backward()
    assert bias.grad is not None


def test_gradients_survive_rows_that_keep_no_key(ns):
    def after_8(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (kv_idx >= 8)

    q, k, v = qkv(T=64, S=64, seed=11, requires_grad=True)
    ns["attend"](q, k, v, form="eager", mask_mod=after_8).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    assert torch.equal(q.grad[:, :, :8], torch.zeros_like(q.grad[:, :, :8]))


# --- profiling ----------------------------------------------------------------------


def test_flop_counter_counts_the_eager_matmuls(ns):
    B, H, H_kv, T_, S, D = 2, 8, 2, 48, 80, 16
    q, k, v = qkv(B=B, H=H, H_kv=H_kv, T=T_, S=S, D=D, seed=12)
    with FlopCounterMode(display=False) as counter:
        ns["attend"](q, k, v, form="eager", mask_mod=sliding_window_64, score_mod=soft_cap_30)
    # 2·B·H·T·S·D for q @ kᵀ and the same for probs @ v
    assert counter.get_total_flops() == 2 * (2 * B * H * T_ * S * D)


# --- compile paths ------------------------------------------------------------------


class TorchWithoutCompiler:
    """torch as the prelude sees it on a machine where compiling fails.

    Only the prelude's own name is replaced: uncompiled flex_attention calls
    torch.compile itself (with the eager backend), so torch must keep its own.
    """

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def compile(fn, *args, **kwargs):
        def fails(*args, **kwargs):
            raise RuntimeError("no C++ compiler on this machine")

        return fails


def test_compile_failure_falls_back_quietly(ns):
    ns["COMPILE"].update(flex_attention=True, create_block_mask=True)
    ns["torch"] = TorchWithoutCompiler()
    q, k, v = qkv(seed=13)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # quietly: our fallback warns nothing
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        flex = ns["attend"](q, k, v, form="flex", mask_mod=sliding_window_64)
    assert ns["RUNTIME_PATHS"] == {
        "attend": "flex", "block_mask": "create_block_mask", "create_block_mask": "eager",
        "flex_attention": "uncompiled",
    }
    assert ns["_COMPILED"] == {"create_block_mask": None, "flex_attention": None}
    eager = ns["attend"](q, k, v, form="eager", mask_mod=sliding_window_64)
    torch.testing.assert_close(eager, flex, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_compiled_flex_and_block_mask_agree_with_eager():
    # Cold compiles take tens of seconds on CPU, so this is the one test that pays.
    ns = load_prelude(compile_=True)
    calls = count_builds(ns)
    q, k, v = qkv(H=8, H_kv=2, seed=14)
    with torch.no_grad():
        for documents in (DOCUMENTS, DOCUMENTS.flip(0)):  # a second batch reuses the compile
            flex = forward_8_layers(ns, documents, q, k, v)
            eager = q
            for _ in range(8):
                eager = ns["attend"](eager, k, v, form="eager", mask_mod=same_document(documents))
            torch.testing.assert_close(eager, flex, rtol=0, atol=1e-4)
    assert ns["RUNTIME_PATHS"] == {
        "attend": "eager", "block_mask": "create_block_mask", "create_block_mask": "compiled",
        "flex_attention": "compiled",
    }
    assert len(calls) == 2  # once per batch


# --- rotary -------------------------------------------------------------------------


def test_rotate_by_index_equals_rotate_by_arange_positions(ns):
    cos, sin = ns["rotary_tables"](16, 512, 500000.0)
    x = torch.randn(2, 4, 100, 16)
    by_index = ns["rotate"](x, cos, sin)
    by_positions = ns["rotate"](x, cos, sin, torch.arange(100).expand(2, 100))
    assert torch.equal(by_index, by_positions)


def test_restarting_positions_rotate_each_document_as_if_alone(ns):
    cos, sin = ns["rotary_tables"](16, 512, 10000.0)
    documents = DOCUMENTS
    starts = torch.searchsorted(documents, documents, right=False)  # first index of each doc
    positions = torch.arange(T).expand(2, T) - starts
    x = torch.randn(2, 4, T, 16)
    packed = ns["rotate"](x, cos, sin, positions)
    for row in range(2):
        for doc in documents[row].unique():
            span = (documents[row] == doc).nonzero().squeeze(1)
            alone = ns["rotate"](x[row : row + 1, :, span], cos, sin)
            assert torch.equal(packed[row : row + 1, :, span], alone)


def test_rotation_matches_the_closed_form_of_each_frequency_pair(ns):
    # Llama's rotate-half pairs dimension i with i + D/2 and turns the pair by
    # position * theta^(-2i/D); checked here against complex multiplication.
    D, theta = 8, 10000.0
    cos, sin = ns["rotary_tables"](D, 64, theta)
    x = torch.randn(1, 1, 64, D, dtype=torch.float64)
    turned = ns["rotate"](x, cos.double(), sin.double())
    pos = torch.arange(64, dtype=torch.float64)[:, None]
    freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    z = torch.complex(x[0, 0, :, : D // 2], x[0, 0, :, D // 2 :]) * torch.exp(1j * pos * freq)
    expected = torch.cat((z.real, z.imag), dim=-1)
    torch.testing.assert_close(turned[0, 0], expected, rtol=0, atol=1e-5)


def test_rotation_keeps_only_the_distance_under_a_document_mask(ns):
    # Attention scores after rotation depend on q - kv, not where counting starts.
    cos, sin = ns["rotary_tables"](16, 4096, 10000.0)
    q, k, _ = qkv(B=1, H=1, T=32, S=32, seed=15)
    scores = []
    for start in (0, 1000):
        positions = torch.arange(start, start + 32)[None]
        qr, kr = ns["rotate"](q, cos, sin, positions), ns["rotate"](k, cos, sin, positions)
        scores.append(qr @ kr.transpose(-2, -1))
    # float32 angles at position 1,000 are off by ~6e-5 rad, on scores of ~10
    torch.testing.assert_close(scores[0], scores[1], rtol=0, atol=2e-3)


# --- the prelude is text ------------------------------------------------------------


def test_importing_the_prelude_does_not_import_torch():
    probe = "import sys, tensorcad.codegen.runtime.prelude; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
