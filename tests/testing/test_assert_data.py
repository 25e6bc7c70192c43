"""tensorcad.testing.assert_data_coverage and assert_data_boundaries: the runtime's verdicts, worded, through the face."""

from __future__ import annotations

import numpy as np
import pytest

from tensorcad.testing import assert_data_boundaries, assert_data_coverage
from tensorcad.testing.certificates import CertificateError


def test_assert_data_coverage_passes_an_epoch_and_names_a_lost_example():
    documents = [{"id": i} for i in range(20)]
    result = assert_data_coverage(documents, [{"id": list(range(10))}, {"id": list(range(10, 20))}])
    assert result.seen == 20
    with pytest.raises(CertificateError, match=r"1 examples lost from 1 documents \(first: 13\)") as raised:
        assert_data_coverage(documents, [{"id": list(range(13))}, {"id": list(range(14, 20))}])
    assert raised.value.report.lost == 1


def test_assert_data_boundaries_names_padding_read_as_documents():
    ids = np.ones((1, 8), dtype=np.int64)
    assert assert_data_boundaries({"input_ids": ids, "position_ids": np.asarray([[0, 1, 2, 0, 1, 0, 1, 2]])},
                                  [[3, 2]]).passed
    with pytest.raises(CertificateError, match="3 tokens of padding .* read as 3 documents"):
        assert_data_boundaries({"input_ids": ids, "position_ids": np.asarray([[0, 1, 2, 0, 1, 0, 0, 0]])}, [[3, 2]])
