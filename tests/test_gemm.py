"""wqk.common.gemm: the oneDNN route computes the same product as torch.matmul, for every operand layout."""

import pytest
import torch

from wqk.common import gemm
from wqk.common.gemm import matmul_nt


def _operand(shape, layout, gen):
    """A float32 matrix (batch) of ``shape`` stored contiguous, as a transpose, as a slice of columns, or as a slice
    of rows of a transpose (its columns contiguous, their starts strided: copied as columns)."""
    if layout == "contiguous":
        return torch.randn(*shape, generator=gen)
    if layout == "transposed":
        return torch.randn(*shape[:-2], shape[-1], shape[-2], generator=gen).transpose(-2, -1)
    if layout == "transposed rows":
        return torch.randn(*shape[:-2], shape[-1], shape[-2] + 5, generator=gen).transpose(-2, -1)[..., 3:-2, :]
    return torch.randn(*shape[:-1], shape[-1] + 5, generator=gen)[..., 3 : 3 + shape[-1]]  # rows strided


LAYOUTS = ["contiguous", "transposed", "column slice", "transposed rows"]


@pytest.mark.parametrize("x_layout", LAYOUTS)
@pytest.mark.parametrize("w_layout", LAYOUTS)
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)], ids=["2d", "batch 3", "batch 2x2"])
@pytest.mark.parametrize("vendor", ["GenuineIntel", "AuthenticAMD"])  # both routes, whatever this CPU
def test_matmul_nt_equals_matmul(monkeypatch, x_layout, w_layout, batch, vendor):
    monkeypatch.setattr(gemm, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(gemm, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    gen = torch.Generator().manual_seed(len(batch))
    x = _operand((*batch, 300, 128), x_layout, gen)
    w = _operand((*batch, 200, 128), w_layout, gen)
    assert gemm.MIN_MACS <= 300 * 128 * 200  # large enough to take the oneDNN route where it is preferred
    expected = (x.double() @ w.double().transpose(-2, -1)).float()
    got = matmul_nt(x, w)
    assert got.shape == expected.shape and got.dtype == torch.float32
    # float32 rounding of a 128-term dot product of N(0, 1) entries: far below 1e-3
    assert torch.allclose(got, expected, atol=1e-3, rtol=1e-5), (got - expected).abs().max()


def test_matmul_nt_broadcasts_one_weight_and_keeps_float64_and_small_products_on_matmul():
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 256, 128, generator=gen), torch.randn(256, 128, generator=gen)
    assert torch.allclose(matmul_nt(x, w), x @ w.T, atol=1e-3)
    x64, w64 = x.double(), w.double()
    assert torch.equal(matmul_nt(x64, w64), x64 @ w64.T)  # float64: torch.matmul itself, bit for bit
    small = torch.randn(8, 4, generator=gen)
    assert torch.equal(matmul_nt(small, small), small @ small.T)


def test_matmul_nt_refuses_mismatched_inner_sizes():
    with pytest.raises(ValueError, match="equal last dimensions"):
        matmul_nt(torch.zeros(3, 4), torch.zeros(3, 5))


def test_without_onednn_the_product_is_torch_matmul(monkeypatch):
    monkeypatch.setattr(gemm, "onednn_available", lambda: False)
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(300, 128, generator=gen), torch.randn(200, 128, generator=gen)
    assert torch.equal(matmul_nt(x, w), x @ w.T)


@pytest.mark.parametrize(
    ("vendor", "flags", "onednn"),
    [
        ("GenuineIntel", {"avx2", "avx512f"}, False),
        ("AuthenticAMD", {"avx2", "avx512f"}, True),
        ("AuthenticAMD", {"avx2"}, False),
    ],
)
def test_the_route_follows_the_cpu(monkeypatch, vendor, flags, onednn):
    """MKL (torch.matmul) on Intel CPUs and AVX2-only CPUs, oneDNN's kernel on other AVX-512 CPUs."""
    if not gemm.onednn_available():
        pytest.skip("this torch build has no oneDNN kernel")
    monkeypatch.setattr(gemm, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(gemm, "cpu_flags", lambda: frozenset(flags))
    calls = []
    monkeypatch.setattr(gemm, "onednn_nt", lambda x, w: calls.append(1) or x @ w.T)
    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(300, 128, generator=gen), torch.randn(200, 128, generator=gen)
    assert torch.equal(matmul_nt(x, w), x @ w.T)
    assert bool(calls) == onednn


def test_a_strided_operand_is_copied_in_its_own_memory_order():
    """oneDNN reads contiguous and transposed contiguous matrices as they are; other slices are copied into the
    one of the two that their memory order is closer to (no transposition in the copy)."""
    gen = torch.Generator().manual_seed(0)
    for layout, kept, column_major in [
        ("contiguous", True, False),
        ("transposed", True, True),
        ("column slice", False, False),
        ("transposed rows", False, True),
    ]:
        x = _operand((40, 24), layout, gen)
        y = gemm._dense(x)
        assert torch.equal(y, x) and (y.data_ptr() == x.data_ptr()) == kept, layout
        assert (y.transpose(0, 1) if column_major else y).is_contiguous(), layout
