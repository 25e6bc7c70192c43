"""data[boundaries] at the kernel, pair by pair: hand-made attention calls (4D boolean masks the test writes)
held to packer lengths, each verdict and message written out here. The recorded calls of real models are in
test_guard_data_boundaries.py; these pin the reading of a call: a varlen call's one row, padding, a window, a
query that cannot see itself, calls that cannot be read or do not match the batch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tensorcad.guard.kernel import CHECK, kernel_findings, packer_documents  # noqa: E402
from tensorcad.guard.recording import AttentionCall  # noqa: E402


def call(mask: torch.Tensor, layer: int = 0, implementation: str = "sdpa", **keywords) -> AttentionCall:
    rows, queries, keys = mask.shape
    return AttentionCall(order=layer, layer=layer, implementation=implementation, mask=mask[:, None],
                         queries=queries, keys=keys, rows=rows, keywords=keywords)


def block_causal(lengths: list[list[int]], tokens: int) -> torch.Tensor:
    """What a kernel keeping the packer's documents apart keeps: causal pairs inside each document."""
    docs = packer_documents(lengths, tokens)
    causal = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    return (docs[:, :, None] == docs[:, None, :]) & (docs[:, :, None] >= 0) & causal


def lines(findings) -> list[str]:
    assert all(f.setting == CHECK for f in findings)
    return [f.line for f in findings]


def test_packer_documents_are_numbered_in_each_row_and_padding_is_minus_one():
    assert packer_documents([[2, 1], [3]], 4).tolist() == [[0, 0, 1, -1], [0, 0, 0, -1]]
    assert packer_documents([[2, 1], [3]], 4).dtype == torch.long


def test_a_kernel_keeping_the_packers_documents_apart_passes_and_a_merge_is_named():
    lengths = [[3, 2], [4]]
    assert kernel_findings([call(block_causal(lengths, 5))], lengths) == []
    merged = block_causal(lengths, 5)
    merged[0, 3, 1] = True  # row 0's token 3 (document 1) sees token 1 (document 0)
    assert lines(kernel_findings([call(merged, layer=2)], lengths)) == [
        "layer 2 (sdpa with 4D tensor): row 0's token 3 (document 1) sees token 1 (document 0): the kernel merges "
        "documents the packer kept apart"]


def test_a_query_that_cannot_see_itself_splits_its_document():
    lengths = [[3, 2]]
    kept = block_causal(lengths, 5)
    kept[0, 4, 4] = False
    assert lines(kernel_findings([call(kept)], lengths)) == [
        "layer 0 (sdpa with 4D tensor): row 0's token 4 cannot see token 4 of its own document 1: the kernel "
        "splits a document the packer made whole"]


def test_padding_read_by_padding_queries_is_no_document():
    # causal over the whole row: the two padding tokens see the real ones; no real token sees padding
    causal = torch.ones(1, 5, 5, dtype=torch.bool).tril()
    assert kernel_findings([call(causal)], [[3]]) == []


def test_a_window_is_what_the_kernel_must_keep_and_no_more():
    lengths = [[6]]
    kept = block_causal(lengths, 6) & (torch.arange(6)[:, None] - torch.arange(6)[None, :] < 2)
    assert kernel_findings([call(kept, sliding_window=2)], lengths) == []
    assert lines(kernel_findings([call(kept)], lengths))[0].startswith(
        "layer 0 (sdpa with 4D tensor): row 0's token 2 cannot see token 0 of its own document 0")
    blind = kept.clone()
    blind[0, 5, 4] = False  # inside the window, far from the row's start
    assert lines(kernel_findings([call(blind, sliding_window=2)], lengths)) == [
        "layer 0 (sdpa with 4D tensor): row 0's token 5 cannot see token 4 of its own document 0: the kernel "
        "splits a document the packer made whole"]


def test_a_varlen_call_holds_every_row_in_one():
    lengths = [[3, 2], [4]]  # the packer's two rows, one varlen row of 9 tokens at the kernel
    flat = [[3, 2, 4]]
    assert kernel_findings([call(block_causal(flat, 9))], lengths) == []
    merged = block_causal(flat, 9)
    merged[0, 6, 4] = True  # the second row's first token sees the first row's last
    assert lines(kernel_findings([call(merged)], lengths)) == [
        "layer 0 (sdpa with 4D tensor): row 0's token 6 (document 2) sees token 4 (document 1): the kernel merges "
        "documents the packer kept apart"]
    # and rows the kernel holds apart are read apart
    assert kernel_findings([call(block_causal(lengths, 5))], lengths) == []


def test_queries_after_a_cache_are_the_last_positions():
    lengths = [[3, 2]]
    kept = block_causal(lengths, 5)[:, 3:]  # the last 2 queries over all 5 keys
    assert kernel_findings([call(kept)], lengths) == []
    kept = kept.clone()
    kept[0, 1, 0] = True
    assert lines(kernel_findings([call(kept)], lengths)) == [
        "layer 0 (sdpa with 4D tensor): row 0's token 4 (document 1) sees token 0 (document 0): the kernel merges "
        "documents the packer kept apart"]


def test_calls_that_cannot_be_read_or_do_not_match_the_batch_are_passed_over_and_the_rest_checked():
    lengths = [[3, 2], [4]]
    merged = block_causal(lengths, 5)
    merged[1, 3, 0] = False  # row 1's token 3 cannot see token 0 of its document
    unread = AttentionCall(order=0, layer=0, implementation="sdpa", mask=object(), queries=5, keys=5, rows=2)
    three_rows = call(torch.ones(3, 5, 5, dtype=torch.bool).tril(), layer=1)
    found = lines(kernel_findings([unread, three_rows, call(merged, layer=2)], lengths))
    assert found == ["layer 2 (sdpa with 4D tensor): row 1's token 3 cannot see token 0 of its own document 0: the "
                     "kernel splits a document the packer made whole"]
