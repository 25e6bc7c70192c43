"""The training step on a padded layout (cu_seqlens beside cu_seqlens_padded): the labels held to the padding."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from step_models import VOCAB, TinyLM  # noqa: E402

from tensorcad.packing import padded_cu_seqlens_of, padded_layout_of, positions_of  # noqa: E402
from tensorcad.runtime.certification.step.batch import read_batch  # noqa: E402
from tensorcad.runtime.certification.step.certificates import certify_step  # noqa: E402

LENGTHS, MULTIPLE, PAD = [5, 9, 3, 8, 7], 8, 0


def padded_batch(labels: str = "clean") -> dict:
    """One row laid out THD-style; ``labels``: clean, or written as if there were no padding (``unpadded``)."""
    real = torch.repeat_interleave(torch.arange(len(LENGTHS)), torch.tensor(LENGTHS))[None]
    cu, cu_padded = padded_cu_seqlens_of(real, MULTIPLE)
    layout = padded_layout_of(cu, cu_padded, MULTIPLE)
    tokens = torch.randint(1, VOCAB, (int(cu[-1]),), generator=torch.Generator().manual_seed(0))
    ids = torch.where(layout >= 0, tokens[layout.clamp(min=0)], torch.full_like(layout, PAD))[None]
    documents = torch.repeat_interleave(torch.arange(len(LENGTHS)), torch.diff(cu_padded))[None]
    first = torch.zeros_like(layout, dtype=torch.bool)
    first[cu_padded[:-1].long()] = True
    if labels == "clean":
        target = torch.where((layout < 0) | first, torch.full_like(layout, -100), ids[0])
    else:  # -100 at each document's first token only: the padding is supervised
        target = torch.where(first, torch.full_like(layout, -100), ids[0])
    return {"input_ids": ids, "labels": target[None], "position_ids": positions_of(documents),
            "cu_seqlens": cu, "cu_seqlens_padded": cu_padded}


def test_the_batch_reads_the_padded_boundaries_and_its_padding():
    batch = padded_batch()
    read = read_batch(batch, shift="inside")
    widths = [-(-n // MULTIPLE) * MULTIPLE for n in LENGTHS]
    assert read.documents[0].tolist() == [d for d, w in enumerate(widths) for _ in range(w)]
    assert read.padding[0].tolist() == [t >= n for n, w in zip(LENGTHS, widths) for t in range(w)]


def test_a_clean_padded_batch_passes_every_step_certificate():
    report = certify_step(TinyLM(), padded_batch(), shift="inside", accumulation="num_items_in_batch")
    assert report.passed, report.message()
    assert report.results["step[labels]"].padded == ()


def test_labels_that_supervise_the_padding_fail_naming_it():
    report = certify_step(TinyLM(), padded_batch("unpadded"), shift="inside", only=["step[labels]"])
    result = report.results["step[labels]"]
    assert not result.passed
    first_padded = next(d for d, n in enumerate(LENGTHS) if n % MULTIPLE)
    last_real = sum(-(-n // MULTIPLE) * MULTIPLE for n in LENGTHS[:first_padded]) + LENGTHS[first_padded] - 1
    assert result.message().startswith(f"row 0: the output at position {last_real}, the last real token of document "
                                       f"{first_padded}, is trained on the padding after it (target {PAD})")
    # Each padded document's last real token (trained on its first pad), and each padding slot but the
    # document's last (trained on the next pad; the last one's target is the next document's first, -100).
    # So one target for each padding slot, counted here from the lengths.
    assert len(result.padded) == sum(-n % MULTIPLE for n in LENGTHS)
