"""functional/'s functions that no method entry's tests pin at their edges (docs/mutation.md,
`functional_rest`): FedLC's offset and FedRS's restriction, values and the accepted ranges;
FedPFT's mixture payload of one mixture."""

import pytest
import torch

from fedshare.errors import FedshareError
from fedshare.functional.calibration import logit_adjustment, restricted_logits
from fedshare.functional.gmm import GaussianMixture, pack_mixtures


def test_fedlc_offset_is_minus_tau_times_the_count_to_the_minus_quarter():
    counts = torch.tensor([16, 1, 0])
    got = logit_adjustment(counts, 2.0)
    want = torch.tensor([-2.0 / 2, -2.0, -2.0 * 1e-9**-0.25])
    torch.testing.assert_close(got, want)
    assert torch.equal(logit_adjustment(counts, 0.0), torch.zeros(3))
    assert logit_adjustment(counts, 1.0, missing_count=16.0)[2].item() == -0.5
    for tau in (-0.5, -1e-3):
        with pytest.raises(FedshareError, match=f"tau={tau} must be non-negative"):
            logit_adjustment(counts, tau)


def test_fedrs_scales_only_the_absent_classes_logits_by_alpha_in_zero_one():
    logits = torch.tensor([[2.0, -4.0, 6.0]])
    present = torch.tensor([True, False, False])
    assert torch.equal(restricted_logits(logits, present, 0.5), torch.tensor([[2.0, -2.0, 3.0]]))
    assert torch.equal(restricted_logits(logits, present, 0.0), torch.tensor([[2.0, 0.0, 0.0]]))
    assert torch.equal(restricted_logits(logits, present, 1.0), logits)
    for alpha in (-0.1, 1.1):
        with pytest.raises(FedshareError, match=r"alpha=.* must be in \[0, 1\]"):
            restricted_logits(logits, present, alpha)


def test_one_full_mixture_packs_to_its_upper_triangle_row_by_row():
    """FedPFT's Section 6.3 payload of a single (label, count, mixture): the upper triangle
    of each covariance in row order, labels and counts as given."""
    cov = torch.tensor([[[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]]])
    g = GaussianMixture(torch.tensor([1.0]), torch.tensor([[7.0, 8.0, 9.0]]), cov, "full")
    payload = pack_mixtures([(4, 9, g)], "full", "float32")
    assert payload["gmm_covs"].tolist() == [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]
    assert payload["gmm_labels"].tolist() == [4] and payload["gmm_counts"].tolist() == [9]
    assert payload["gmm_means"].tolist() == [[7.0, 8.0, 9.0]]
