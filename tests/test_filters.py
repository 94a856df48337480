"""The ConvMixer filter families: each family's defining structure and scale, seeding, parsing, the rank tools."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pipeline.errors import PipelineError
from pipeline.method.filters import (
    CI_GAIN,
    head_assignment,
    linear_format,
    make_filters,
    make_fullperm,
    make_perm,
    make_token_mixer,
    proposition1_holds,
    softmax_taps,
)
from pipeline.method.filters import effective_rank as erank
from pipeline.method.names import BEYOND_PAPER, FILTER_FAMILIES, parse_filter, parse_study_variant

CONV_FAMILIES = ["random", "softmax", "impulse", "box-4", "gaussian-0.5"]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_registry_lists_every_family_and_each_parses():
    written = {"random": "random", "softmax": "softmax", "impulse": "impulse", "box": "box-3",
               "gaussian": "gaussian-0.3", "perm": "perm", "fullperm": "fullperm"}
    assert set(FILTER_FAMILIES) == set(written)
    for kind, name in written.items():
        assert parse_filter(name).kind == kind
    assert parse_filter(" Gaussian-0.10 ").name == "gaussian-0.1"
    assert parse_filter("box-9", kernel_size=3).param == 9
    assert parse_filter("perm").linear_format and not parse_filter("impulse").linear_format
    assert parse_filter("fullperm").linear_format and not parse_filter("softmax").linear_format
    assert parse_filter("softmax").softmax_taps and not parse_filter("random").softmax_taps
    assert set(BEYOND_PAPER) == {"perm", "fullperm"}  # code-2401 never swept its linear format
    assert parse_filter("perm").beyond_paper and not parse_filter("softmax").beyond_paper


@pytest.mark.parametrize("variant, name, kind, learned", [
    ("learned", "learned", "random", True),  # code-2401's default arm: --init random, trained
    ("learned-softmax", "learned-softmax", "softmax", True),
    (" Learned-Box-25 ", "learned-box-25", "box", True),
    ("softmax", "softmax", "softmax", False),  # --fix_spatial
    ("box-1", "box-1", "box", False),
])
def test_study_variants_name_a_family_and_whether_it_trains(variant, name, kind, learned):
    v = parse_study_variant(variant, 5)
    assert (v.name, v.family.kind, v.learned) == (name, kind, learned)


@pytest.mark.parametrize("variant, fragment", [("learned-random", "write 'learned'"), ("learned-sobel", "'sobel'"),
                                               ("learned-box-30", "only 25 taps"), ("frozen", "'learned-<family>'")])
def test_bad_study_variants_name_the_fix(variant, fragment):
    with pytest.raises(PipelineError, match=fragment):
        parse_study_variant(variant, 5)

@pytest.mark.parametrize(
    "name, kernel_size, fragment",
    [
        ("sobel", None, "unknown family 'sobel'"),
        ("box-0", None, "n >= 1"),
        ("box-2.5", None, "'2.5'"),
        ("box-10", 3, "only 9 taps"),
        ("gaussian--1", None, "'-1'"),
        ("gaussian-abc", None, "'abc'"),
        ("gaussian-inf", None, "'inf'"),
        ("impulse-3", None, "takes no value"),
        (3, None, "not a string"),
    ],
)
def test_invalid_names_raise_pipeline_error_naming_the_value_and_forms(name, kernel_size, fragment):
    with pytest.raises(PipelineError) as err:
        parse_filter(name, kernel_size)
    assert fragment in str(err.value)
    assert "gaussian-<sigma>" in str(err.value) and repr(name) in str(err.value)


@pytest.mark.parametrize("kernel_size", [4, 0, -3, 2.0])
def test_even_or_bad_kernel_is_refused(kernel_size):
    with pytest.raises(PipelineError, match="odd positive integer"):
        make_filters("impulse", 4, kernel_size, gen())


def test_perm_has_no_conv_format_and_box_must_fit_the_kernel():
    for family in ("perm", "fullperm"):
        with pytest.raises(PipelineError, match="make_token_mixer"):
            make_filters(family, 4, 3, gen())
    with pytest.raises(PipelineError, match="make_filters"):
        make_token_mixer("softmax", 4, gen())
    with pytest.raises(PipelineError, match="only 9 taps"):
        make_filters("box-10", 4, 3, gen())
    with pytest.raises(PipelineError, match="heads"):
        make_filters("random", 0, 3, gen())


def test_random_is_uniform_on_plus_minus_one_over_k():
    w = make_filters("random", 2000, 5, gen())
    assert w.abs().max() <= 1 / 5
    assert w.abs().max() > 0.99 / 5 and abs(w.mean()) < 0.005  # fills the interval, centred
    assert w.var().item() == pytest.approx((1 / 5) ** 2 / 3, rel=0.03)  # variance of U(-a, a) is a^2/3


def test_softmax_stores_random_taps_and_applies_their_softmax():
    """code-2401 (`convmixer.py`): the stored taps are U(-1/k, 1/k) like `random`; each forward pass applies
    exp(w_j) / sum_i exp(w_i) over the k*k taps of each filter, unscaled."""
    k = 5
    raw = make_filters("softmax", 2000, k, gen())
    assert torch.equal(raw, make_filters("random", 2000, k, gen()))  # the same law and draw as `random`
    applied = softmax_taps(raw)
    flat = raw.flatten(1).double()
    expected = (flat.exp() / flat.exp().sum(1, keepdim=True)).reshape(raw.shape)
    assert torch.allclose(applied.double(), expected, atol=1e-7)
    assert torch.allclose(applied.flatten(1).sum(1), torch.ones(2000))  # each filter sums to 1
    assert (applied > 0).all()
    # |w| <= 1/k keeps every tap within exp(+-2/k) of the mean filter 1/k^2: frozen, nearly a box filter
    ratio = applied * k * k
    assert ratio.max() <= math.exp(2 / k) + 1e-6 and ratio.min() >= math.exp(-2 / k) - 1e-6


def test_fullperm_is_a_permutation_matrix_scaled_by_sqrt_third():
    m = make_fullperm(64, gen())
    ones = m / math.sqrt(1 / CI_GAIN)
    assert torch.equal(ones.sum(0), torch.ones(64)) and torch.equal(ones.sum(1), torch.ones(64))
    assert ((ones == 0) | (ones == 1)).all()
    assert torch.allclose(ones @ ones.T, torch.eye(64))  # orthogonal: a true permutation
    assert torch.equal(make_token_mixer("fullperm", 64, gen()), m)
    assert not torch.equal(m, torch.eye(64) * math.sqrt(1 / CI_GAIN))


def test_impulse_is_one_hot_per_filter_scaled_by_sqrt_third():
    w = make_filters("impulse", 500, 3, gen()).flatten(1)
    assert ((w != 0).sum(1) == 1).all()
    assert torch.allclose(w.sum(1), torch.full((500,), math.sqrt(1 / CI_GAIN)))
    assert set(w.argmax(1).tolist()) == set(range(9))  # every tap can be chosen


@pytest.mark.parametrize("n", [1, 4, 9])
def test_box_has_exactly_n_ones_before_scaling(n):
    w = make_filters(f"box-{n}", 300, 3, gen()).flatten(1)
    ones = w / math.sqrt(1 / (CI_GAIN * n))
    assert ((ones == 0) | torch.isclose(ones, torch.ones_like(ones))).all()
    assert (torch.isclose(ones, torch.ones_like(ones)).sum(1) == n).all()
    assert torch.allclose(w.pow(2).sum(1), torch.full((300,), 1 / CI_GAIN))  # every box has ||w||^2 = 1/3
    if n == 9:
        assert torch.allclose(w, w[:, :1].expand_as(w))  # box-9 on 3x3 is the mean filter


@pytest.mark.parametrize("sigma", [0.1, 0.5, 2.0])
def test_gaussian_peaks_at_its_centre_and_decays_with_distance_sigma_as_variance(sigma):
    k = 5
    w = make_filters(f"gaussian-{sigma}", 64, k, gen())
    rows, cols = torch.meshgrid(torch.arange(k), torch.arange(k), indexing="ij")
    for f in w:
        r, c = divmod(int(f.argmax()), k)
        d2 = ((rows - r) ** 2 + (cols - c) ** 2).float()
        assert torch.allclose(f, f.max() * torch.exp(-d2 / (2 * sigma)), rtol=1e-5)  # variance, not std
        order = d2.flatten().argsort()
        values = f.flatten()[order]
        assert (values[1:] <= values[:-1] + 1e-7).all()  # monotone decay with distance
    assert w.flatten(1).pow(2).sum(1).mean() * CI_GAIN == pytest.approx(1.0, rel=1e-5)


def test_perm_rows_are_one_hot_with_columns_drawn_with_replacement():
    m = make_perm(64, gen())
    assert ((m != 0).sum(1) == 1).all()
    assert torch.allclose(m[m != 0], torch.tensor(math.sqrt(1 / CI_GAIN)))
    assert len(set(m.argmax(1).tolist())) < 64  # with replacement: not a permutation


@pytest.mark.parametrize("family", CONV_FAMILIES)
def test_same_seed_same_filters_other_seed_different(family):
    assert torch.equal(make_filters(family, 16, 3, gen(1)), make_filters(family, 16, 3, gen(1)))
    assert not torch.equal(make_filters(family, 16, 3, gen(1)), make_filters(family, 16, 3, gen(2)))


def test_perm_and_head_assignment_are_seeded():
    assert torch.equal(make_perm(16, gen(3)), make_perm(16, gen(3)))
    assert not torch.equal(make_perm(16, gen(3)), make_perm(16, gen(4)))
    assert torch.equal(make_fullperm(16, gen(3)), make_fullperm(16, gen(3)))
    assert not torch.equal(make_fullperm(16, gen(3)), make_fullperm(16, gen(4)))
    assert torch.equal(head_assignment(32, 4, gen(3)), head_assignment(32, 4, gen(3)))
    assert not torch.equal(head_assignment(32, 4, gen(3)), head_assignment(32, 4, gen(4)))


def test_no_global_rng_is_used():
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    for family in CONV_FAMILIES:
        make_filters(family, 8, 3, gen())
    make_perm(8, gen())
    make_fullperm(8, gen())
    head_assignment(8, 2, gen())
    assert torch.equal(before, torch.random.get_rng_state())


def test_head_assignment_uses_every_filter_evenly():
    choice = head_assignment(30, 4, gen())
    assert sorted(torch.bincount(choice).tolist()) == [7, 7, 8, 8]
    assert sorted(head_assignment(10, 10, gen()).tolist()) == list(range(10))  # heads == C: a permutation
    for heads in (0, 11):
        with pytest.raises(PipelineError, match="between 1 and the 10 channels"):
            head_assignment(10, heads, gen())


def test_linear_format_of_impulses_is_a_shift_with_zero_padding():
    impulses = torch.zeros(2, 3, 3)
    impulses[0, 1, 1] = 1  # centre tap: identity
    impulses[1, 1, 2] = 1  # right tap: output (r, c) reads input (r, c+1)
    m = linear_format(impulses, (4, 5))
    assert torch.equal(m[0], torch.eye(20))
    for r in range(4):
        for c in range(5):
            row = m[1, r * 5 + c]
            if c < 4:
                assert row[r * 5 + c + 1] == 1 and row.sum() == 1
            else:
                assert row.sum() == 0  # zero padding past the right edge


def test_linear_format_matches_conv2d():
    filters = make_filters("random", 3, 3, gen())
    x = torch.randn(2, 3, 6, 7, generator=gen(1))
    conv = F.conv2d(x, filters.unsqueeze(1), padding=1, groups=3).flatten(2)
    matrix = torch.einsum("bcn,cmn->bcm", x.flatten(2), linear_format(filters, (6, 7)))
    assert torch.allclose(conv, matrix, atol=1e-6)


def test_effective_rank_counts_singular_values_holding_the_energy():
    q1, _ = torch.linalg.qr(torch.randn(50, 3, generator=gen()))
    q2, _ = torch.linalg.qr(torch.randn(20, 3, generator=gen(1)))
    X = q1 @ torch.diag(torch.tensor([3.0, 2.0, 1.0])) @ q2.T  # energies 9, 4, 1 of 14
    assert erank(X, 0.5) == 1  # 9/14 = 0.64
    assert erank(X, 0.9) == 2  # 13/14 = 0.93
    assert erank(X, 0.95) == 3
    assert erank(X, 1.0) == 3
    assert erank(torch.zeros(4, 4)) == 0
    with pytest.raises(PipelineError, match="energy"):
        erank(X, 1.5)
    with pytest.raises(PipelineError, match="2-D"):
        erank(torch.zeros(2, 3, 4))


def test_proposition1_condition():
    assert proposition1_holds(512, 20, 5)  # 20 * 25 = 500 <= 512
    assert not proposition1_holds(512, 21, 5)  # 525 > 512
    assert proposition1_holds(9, 1, 3)
