"""The batch audit's every branch, line for line, on batches written here token by token.

test_audit.py holds the audit to the collator's own batches; this file pins what each finding says
(its setting, its whole line, whether it switches packing off) and which representation the audit
believes first, so that a changed word, count or preference fails (issue 42: the guard's audit held
to a mutation score).
"""

from __future__ import annotations

import torch

from tensorcad.guard import audit_batch
from tensorcad.guard.audit import Finding, _starts, _use_cache, documents_of, representations


class Config:
    model_type = "llama"
    _attn_implementation = "sdpa"
    use_cache = False


class Model:
    config = Config()


def model(**settings):
    config = type("Config", (Config,), settings)()
    return type("Model", (), {"config": config})()


IDS = torch.arange(6)[None]
PACKED = torch.tensor([[0, 1, 2, 0, 1, 0]])  # three documents: tokens 0-2, 3-4, 5
STRAIGHT = torch.arange(6)[None]


def test_starts_marks_each_documents_first_token_as_booleans():
    starts = _starts(torch.tensor([[0, 0, 1, 1, 2], [4, 4, 4, 4, 4]]))
    assert starts.dtype == torch.bool
    assert starts.tolist() == [[True, False, True, False, True], [True, False, False, False, False]]


def test_the_documents_come_from_the_most_direct_representation_first():
    documents = torch.tensor([[0, 0, 0, 0, 0, 0]])
    seq_idx = torch.tensor([[0, 0, 1, 1, 1, 1]])
    cu_q, cu_k = torch.tensor([0, 3, 6]), torch.tensor([0, 4, 6])
    batch = {"input_ids": IDS, "documents": documents, "seq_idx": seq_idx, "cu_seq_lens_q": cu_q,
             "cu_seq_lens_k": cu_k, "position_ids": PACKED}
    order = [("documents", [0, 0, 0, 0, 0, 0]), ("seq_idx", [0, 0, 1, 1, 1, 1]), ("cu_seq_lens_q", [0, 0, 0, 1, 1, 1]),
             ("cu_seq_lens_k", [0, 0, 0, 0, 1, 1]), ("position_ids", [0, 0, 0, 1, 1, 2])]
    for key, want in order:
        assert documents_of(batch)[0].tolist() == want, key
        assert representations(batch)[key][0].tolist() == want
        del batch[key]
    assert documents_of(batch) is None and representations(batch) == {}


def test_positions_that_miss_a_start_are_named_against_each_representation():
    for key, value in (("documents", torch.tensor([[0, 0, 0, 1, 1, 2]])),
                       ("seq_idx", torch.tensor([[0, 0, 0, 1, 1, 2]])),
                       ("cu_seq_lens_q", torch.tensor([0, 3, 5, 6])),
                       ("cu_seq_lens_k", torch.tensor([0, 3, 5, 6]))):
        [finding] = audit_batch(Model(), {"input_ids": IDS, key: value, "position_ids": STRAIGHT})
        assert finding == Finding("position_ids", f"position_ids do not restart where {key} says a document begins "
                                                  "(2 documents, first at row 0, token 3): pass each token's position "
                                                  "in its own document (the collator's position_ids)",
                                  switches_packing_off=True), key


def test_positions_that_restart_inside_a_document_are_named():
    [finding] = audit_batch(Model(), {"input_ids": IDS, "documents": torch.tensor([[0, 0, 0, 1, 1, 1]]),
                                      "position_ids": PACKED})
    assert finding == Finding("position_ids", "position_ids restart where documents names no new document "
                                              "(first at row 0, token 5): the two disagree on the documents")
    assert not finding.switches_packing_off


def test_a_representation_of_another_shape_is_passed_over_for_the_next():
    batch = {"input_ids": IDS, "documents": torch.zeros(1, 4, dtype=torch.long),  # not the positions' shape
             "seq_idx": torch.tensor([[0, 0, 0, 1, 1, 2]]), "position_ids": STRAIGHT}
    [finding] = audit_batch(Model(), batch)
    assert "where seq_idx says a document begins" in finding.line


def test_labels_at_a_documents_first_token_and_not_at_a_rows_first():
    labels = torch.tensor([[7, 8, 9, 10, 11, 12]])  # the row's first label is no crossing: nothing before it
    [finding] = audit_batch(Model(), {"input_ids": IDS, "position_ids": PACKED, "labels": labels})
    assert finding == Finding("labels", "labels are not -100 at 2 documents' first tokens (first at row 0, token 3): "
                                        "each document's last token learns to predict the next document; set labels "
                                        "to -100 there (DataCollatorWithFlattening does)")
    one_token_first = torch.tensor([[0, 0, 1, 2, 0, 1]])  # a document of one token, then one starting at token 1
    [finding] = audit_batch(Model(), {"input_ids": IDS, "position_ids": one_token_first, "labels": labels})
    assert "at 2 documents' first tokens (first at row 0, token 1)" in finding.line
    clean = labels.masked_fill(PACKED == 0, -100)
    assert audit_batch(Model(), {"input_ids": IDS, "position_ids": PACKED, "labels": clean}) == []


def test_shift_labels_at_a_documents_last_token_are_named():
    shifted = torch.tensor([[1, 2, 3, 4, 5, -100]])
    [finding] = audit_batch(Model(), {"input_ids": IDS, "position_ids": PACKED, "shift_labels": shifted})
    assert finding == Finding("shift_labels", "shift_labels at 2 documents' last tokens name the next document's "
                                              "first token (first at row 0, token 2): set them to -100")
    clean = torch.tensor([[1, 2, -100, 4, -100, -100]])
    batch = {"input_ids": IDS, "position_ids": PACKED, "shift_labels": clean, "labels": torch.full((1, 6), 3)}
    assert audit_batch(Model(), batch) == []  # shift_labels, when given, are what the loss reads


def test_supervised_padding_is_counted_and_needs_a_2d_mask_and_labels():
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    labels = torch.tensor([[-100, 2, 3, 4, 5, -100]])
    [finding] = audit_batch(Model(), {"input_ids": IDS, "attention_mask": mask, "labels": labels})
    assert finding == Finding("labels", "1 padding tokens (attention_mask 0) are supervised (first at row 0, "
                                        "token 4): set their labels to -100")
    assert audit_batch(Model(), {"input_ids": IDS, "attention_mask": mask}) == []
    assert audit_batch(Model(), {"input_ids": IDS, "attention_mask": mask[None], "labels": labels}) == []


def test_the_cache_is_on_with_a_cache_object_or_as_the_call_or_config_says():
    assert _use_cache(Model(), {"past_key_values": object()}) and _use_cache(Model(), {"cache": object()})
    assert _use_cache(model(use_cache=True), {}) and not _use_cache(model(use_cache=True), {"use_cache": False})
    assert _use_cache(Model(), {"use_cache": True}) and not _use_cache(Model(), {})
    assert _use_cache(object(), {}) is False and _use_cache(type("M", (), {"config": object()})(), {}) is False


def test_the_settings_that_switch_packing_off_each_say_what_to_change():
    positions = {"input_ids": IDS, "position_ids": PACKED}
    [cache] = audit_batch(model(use_cache=True), positions)
    assert cache == Finding("use_cache", "use_cache is on (a cache is built, and with a cache transformers ignores "
                                         "the restarting position_ids); pass use_cache=False or set "
                                         "model.config.use_cache = False", switches_packing_off=True)
    [ones] = audit_batch(Model(), {**positions, "attention_mask": torch.ones(1, 6, dtype=torch.long)})
    assert ones == Finding("attention_mask", "an all-ones attention_mask was passed beside position_ids; drop it "
                                             "(transformers reads packed documents from position_ids only when no "
                                             "2D attention_mask is given)", switches_packing_off=True)
    [two_d] = audit_batch(Model(), {**positions, "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]])})
    assert two_d.line.startswith("a 2D attention_mask was passed beside position_ids")
    [four_d] = audit_batch(Model(), {**positions, "attention_mask": torch.zeros(1, 1, 6, 6)})
    assert four_d == Finding("attention_mask", "a 4D attention_mask was passed: transformers uses it as it is, for "
                                               "every layer, windows included; it must hold each layer's own mask "
                                               "(or pass restarting position_ids and no mask)")
    flash = model(_attn_implementation="flash_attention_2")
    findings = audit_batch(flash, {**positions, "attention_mask": torch.zeros(1, 1, 6, 6)})
    assert findings[-1] == Finding("attn_implementation", "flash_attention_2 reads the attention_mask and ignores "
                                                          "position_ids when a mask is given; drop the mask",
                                   switches_packing_off=True)
    assert audit_batch(flash, positions) == []  # no mask: nothing ignored
    straight = {"input_ids": IDS, "position_ids": STRAIGHT, "attention_mask": torch.ones(1, 6, dtype=torch.long)}
    assert audit_batch(model(use_cache=True), straight) == []  # nothing packed: nothing switched off


def test_a_model_that_is_not_a_transformers_model_keeps_its_own_settings():
    batch = {"input_ids": IDS, "position_ids": PACKED, "attention_mask": torch.ones(1, 6, dtype=torch.long)}
    assert audit_batch(object(), batch) == []
    no_type = type("M", (), {"config": type("C", (), {"use_cache": True})()})()
    assert audit_batch(no_type, batch) == []


def test_a_finding_in_json_keeps_its_setting_line_and_switch():
    finding = Finding("use_cache", "pass use_cache=False", switches_packing_off=True)
    assert finding.to_json() == {"setting": "use_cache", "line": "pass use_cache=False", "switchesPackingOff": True}
    assert Finding("labels", "x").to_json()["switchesPackingOff"] is False


def test_unbatched_tensors_are_read_as_one_row():
    one_d = {"input_ids": IDS[0], "position_ids": STRAIGHT[0], "documents": torch.tensor([0, 0, 0, 1, 1, 2])}
    two_d = {k: v[None] for k, v in one_d.items()}
    assert audit_batch(Model(), one_d) == audit_batch(Model(), two_d) != []
    assert representations(one_d)["documents"].shape == (1, 6)


def test_representations_need_no_input_ids_but_cu_seq_lens_do():
    batch = {"position_ids": PACKED, "cu_seq_lens_q": torch.tensor([0, 3, 5, 6])}
    assert set(representations(batch)) == {"position_ids"}  # no ids: no shape to lay cu_seq_lens out on


def test_cu_seq_lens_over_two_rows_give_each_row_its_documents():
    ids = torch.zeros(2, 4, dtype=torch.long)
    cu = torch.tensor([0, 1, 4, 6, 8])  # row 0: 1 + 3 tokens; row 1: 2 + 2
    assert representations({"input_ids": ids, "cu_seq_lens_q": cu})["cu_seq_lens_q"].tolist() == [
        [0, 1, 1, 1], [0, 0, 1, 1]]  # each row's documents counted from 0


def test_a_restart_at_the_second_token_is_packing_too():
    restart_at_one = torch.tensor([[0, 0, 1, 2, 3, 4]])  # a one-token document, then the rest
    [finding] = audit_batch(model(use_cache=True), {"input_ids": IDS, "position_ids": restart_at_one})
    assert finding.setting == "use_cache"
