"""Multi-token prediction in the generated code (issue 46): a design with ``mtp`` generates its MTP modules
(``training_model()``), the same code ``tensorcad.runtime.with_mtp`` runs, and the step certificates hold
every head of the generated training model."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tensorcad.codegen import generate  # noqa: E402
from tensorcad.design import load  # noqa: E402
from tensorcad.runtime import build, with_mtp  # noqa: E402
from tensorcad.runtime.building import load_module  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "analysis"))
from test_mtp_cost import DESIGN  # noqa: E402


def design(depth):
    return load({**copy.deepcopy(DESIGN), "mtp": {"depth": depth}})


@pytest.mark.parametrize("depth", [1, 2])
def test_the_generated_training_model_is_the_runtimes_mtp_with_the_same_weights(depth):
    module = load_module(generate(design(depth)), "tiny-mtp")
    ours = module.training_model(form="eager")
    assert module.MTP_DEPTH == depth and len(ours.mtp) == depth
    torch.manual_seed(0)
    theirs = with_mtp(build(design(depth), form="eager"), depth)
    theirs.load_state_dict(ours.state_dict())
    lengths = (9, 14, 9)
    documents = torch.cat([torch.full((n,), d) for d, n in enumerate(lengths)])[None]
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    ids = torch.randint(0, 50, documents.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, want = ours.heads(ids, documents, positions), theirs.heads(ids, documents, positions)
    assert len(got) == depth + 1 and all(torch.equal(a, b) for a, b in zip(got, want))
    assert torch.equal(ours.mtp_targets(ids, documents), theirs.mtp_targets(ids, documents))


def test_the_step_certificates_hold_every_head_of_the_generated_training_model():
    from tensorcad.runtime.certification import certify_step
    from tensorcad.runtime.certification.step.next_token import SHIFT, next_token_labels, next_token_loss

    module = load_module(generate(design(2)), "tiny-mtp")
    model = module.training_model(form="eager").eval()
    lengths = (9, 14, 9)
    documents = torch.cat([torch.full((n,), d) for d, n in enumerate(lengths)])[None]
    ids = torch.randint(0, 50, documents.shape, generator=torch.Generator().manual_seed(2))
    batch = {"input_ids": ids, "documents": documents, "labels": next_token_labels(ids, documents)}
    report = certify_step(model, batch, loss=next_token_loss, shift=SHIFT)
    assert report.passed, report.message()
    assert "the 2 MTP heads' targets each within its document" in report.results["step[labels]"].message()
    model.roll = "plain"  # the roll over the whole row: the heads trained across boundaries
    failed = certify_step(model, batch, loss=next_token_loss, shift=SHIFT, only=["step[labels]"])
    assert not failed.passed and failed.results["step[labels]"].message().startswith("head 1: row 0: ")


def test_a_design_without_mtp_generates_none():
    source = generate(load(copy.deepcopy(DESIGN)))
    assert "MultiTokenPrediction" not in source and "import copy" not in source
