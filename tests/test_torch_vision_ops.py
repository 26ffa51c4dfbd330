"""Convolutions (forward and both backward products), pooling and its backward, batch norm in training mode with
its running statistics, interpolation and indexing through torch.compile(backend="dvmlang"): each against torch
eager, with no fallback (dvmlang/torch/aten_conv.py, aten_ops.py)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dvmlang.torch as D  # noqa: E402

RTOL, ATOL = 1e-4, 1e-4


def _train_check(make, *inputs, dynamic=False):
    """Forward and gradients (inputs and parameters) of ``make()`` compiled against eager, no fallback."""
    torch.manual_seed(0)
    m = make()
    torch.manual_seed(0)
    ref = make()
    ref.load_state_dict(m.state_dict())
    xs = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    xr = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    torch._dynamo.reset()
    D.reset_stats()
    out = torch.compile(m, backend="dvmlang", dynamic=dynamic)(*xs)
    exp = ref(*xr)
    np.testing.assert_allclose(out.detach().numpy(), exp.detach().numpy(), rtol=RTOL, atol=ATOL)
    (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
    (exp * torch.linspace(-1, 1, exp.numel()).view(exp.shape)).sum().backward()
    for a, b in zip(xs, xr):
        if b.grad is not None:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=RTOL, atol=ATOL)
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)
    for (name, b), c in zip(m.named_buffers(), ref.buffers()):
        np.testing.assert_allclose(b.numpy(), c.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)
    s = D.stats()
    assert s["fallback_ops"] == {}, (s["fallback_ops"], s["runtime_reasons"])
    return s


@pytest.mark.parametrize("kw", [
    dict(cin=3, cout=4, k=3, padding=1),
    dict(cin=4, cout=6, k=3, stride=2),
    dict(cin=4, cout=4, k=3, padding=2, dilation=2),
    dict(cin=4, cout=4, k=3, padding=1, groups=4),  # depthwise
    dict(cin=4, cout=8, k=3, padding=1, groups=4),  # depthwise with a channel multiplier
    dict(cin=4, cout=6, k=(1, 3), padding=(0, 1), groups=2),
    dict(cin=3, cout=8, k=4, stride=4),  # a patch embedding
])
def test_conv2d_forward_and_backward(kw):
    kw = dict(kw)
    cin, cout, k = kw.pop("cin"), kw.pop("cout"), kw.pop("k")
    _train_check(lambda: torch.nn.Conv2d(cin, cout, k, **kw), torch.randn(2, cin, 9, 8))


@pytest.mark.parametrize("kw", [
    dict(cin=3, cout=5, k=3, stride=2, padding=1, output_padding=1),  # a decoder's 2x upsampling
    dict(cin=4, cout=6, k=2, stride=2, groups=2),
    dict(cin=4, cout=4, k=3, padding=1, groups=4),  # depthwise
    dict(cin=2, cout=3, k=3, stride=3, padding=2, output_padding=2, dilation=2),
    dict(cin=6, cout=4, k=(4, 3), stride=(2, 1), padding=(1, 0)),
    dict(cin=3, cout=2, k=1),
])
@pytest.mark.parametrize("dynamic", [False, True])
def test_transposed_conv2d_forward_and_backward(kw, dynamic):
    """A transposed convolution is its convolution's input gradient; its backward swaps the convolution's input
    and output gradient (torch's definition: y[o * stride - padding + k * dilation] += x[o] * w[k])."""
    kw = dict(kw)
    cin, cout, k = kw.pop("cin"), kw.pop("cout"), kw.pop("k")
    _train_check(lambda: torch.nn.ConvTranspose2d(cin, cout, k, **kw), torch.randn(2, cin, 5, 4), dynamic=dynamic)


def test_transposed_conv1d_upsampler():
    """An audio decoder's upsampling stack: transposed 1-d convolutions (stride 4 and 2) between activations."""
    make = lambda: torch.nn.Sequential(  # noqa: E731
        torch.nn.ConvTranspose1d(8, 6, 8, stride=4, padding=2), torch.nn.LeakyReLU(0.1),
        torch.nn.ConvTranspose1d(6, 3, 4, stride=2, padding=1, groups=3), torch.nn.Tanh())
    _train_check(make, torch.randn(2, 8, 6))


@pytest.mark.parametrize("size,out", [((5, 7), (3, 2)), ((4, 4), (7, 7)), ((9, 5), (2, 3)), ((10, 6), (3, 6))])
@pytest.mark.parametrize("dynamic", [False, True])
def test_adaptive_average_pools_with_uneven_windows(size, out, dynamic):
    """Windows of different sizes (torch's [floor(i * n / o), ceil((i + 1) * n / o)), overlapping when the output
    is larger) and sizes known only at run time: the separable averaging matrices, forward and backward."""
    make = lambda: torch.nn.Sequential(  # noqa: E731
        torch.nn.Conv2d(3, 4, 1), torch.nn.AdaptiveAvgPool2d(out), torch.nn.Flatten(),
        torch.nn.Linear(4 * out[0] * out[1], 5))
    _train_check(make, torch.randn(2, 3, *size), dynamic=dynamic)


@pytest.mark.parametrize("size,out", [((5, 7), (3, 2)), ((4, 4), (7, 5)), ((9, 5), (2, 3)), ((6, 6), (3, 3))])
def test_adaptive_max_pools(size, out):
    """Torch's adaptive windows (overlapping when the output is larger), forward and backward, and the indices
    torch returns (the first maximum in row-major order: integer-valued inputs have ties)."""
    make = lambda: torch.nn.Sequential(  # noqa: E731
        torch.nn.Conv2d(3, 4, 1), torch.nn.AdaptiveMaxPool2d(out), torch.nn.Flatten(),
        torch.nn.Linear(4 * out[0] * out[1], 5))
    _train_check(make, torch.randn(2, 3, *size))
    xi = torch.randint(0, 3, (1, 2, *size)).float()
    f = lambda v: torch.nn.functional.adaptive_max_pool2d(v * 1, out, return_indices=True)  # noqa: E731
    torch._dynamo.reset()
    got, want = torch.compile(f, backend="dvmlang")(xi), f(xi)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dynamic", [False, True])
def test_grid_sample(mode, padding_mode, align_corners, dynamic):
    """``F.grid_sample`` at points inside and outside the input (a spatial transformer's resampling): torch's
    unnormalisation for both ``align_corners``, zeros or clipped coordinates outside, against eager."""
    g = torch.Generator().manual_seed(5)
    img = torch.randn(2, 3, 6, 7, generator=g)
    grid = torch.rand(2, 4, 5, 2, generator=g) * 2.4 - 1.2
    grid[0, 0, 0] = torch.tensor([1.0, -1.0])  # (a corner exactly)
    f = lambda a, p: torch.nn.functional.grid_sample(  # noqa: E731
        a * 1, p, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    torch._dynamo.reset()
    D.reset_stats()
    got = torch.compile(f, backend="dvmlang", dynamic=dynamic)(img, grid)
    np.testing.assert_allclose(got.numpy(), f(img, grid).numpy(), rtol=1e-5, atol=1e-5)
    assert D.stats()["fallback_ops"] == {}


def test_conv1d_causal_and_depthwise():
    class Causal(torch.nn.Module):  # a state-space model's causal depthwise conv: pad both sides, keep the first L
        def __init__(self):
            super().__init__()
            self.c = torch.nn.Conv1d(6, 6, 4, padding=3, groups=6)
            self.p = torch.nn.Conv1d(6, 5, 1)

        def forward(self, x):
            return self.p(torch.nn.functional.silu(self.c(x)[..., :x.shape[-1]]))
    _train_check(Causal, torch.randn(2, 6, 7))


def test_max_pool_and_batch_norm_train_mode_update_running_stats():
    make = lambda: torch.nn.Sequential(  # noqa: E731
        torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, stride=2, padding=1), torch.nn.Conv2d(4, 4, 1)).train()
    _train_check(make, torch.randn(2, 3, 8, 8))


def test_pooling_variants_in_eval():
    m = torch.nn.Sequential(torch.nn.AvgPool2d(2), torch.nn.MaxPool2d(2, ceil_mode=True),
                            torch.nn.AdaptiveAvgPool2d(1)).eval()
    x = torch.randn(2, 3, 10, 10)
    D.reset_stats()
    with torch.no_grad():
        np.testing.assert_allclose(torch.compile(m, backend="dvmlang")(x).numpy(), m(x).numpy(), rtol=RTOL, atol=ATOL)
    assert D.stats()["fallback_ops"] == {}


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("kernel,stride,padding", [(3, 2, 1), (2, 2, 1), (3, 1, 0), (2, 3, 0)])
@pytest.mark.parametrize("dynamic", [False, True])
def test_average_pools_divide_by_what_torch_counts(kernel, stride, padding, ceil_mode, count_include_pad, dynamic):
    """With ceil_mode the last windows run past the padded input, and with count_include_pad=False a window's
    padding is not counted (Funnel, PoolFormer): each window's divisor is what torch counts for it."""
    f = torch.nn.AvgPool2d(kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    x = torch.randn(2, 3, 7, 9)
    torch._dynamo.reset()
    D.reset_stats()
    got = torch.compile(lambda x: f(x * 2) + 1, backend="dvmlang", dynamic=dynamic)(x)
    want = f(x * 2) + 1
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    assert D.stats()["fallback_ops"] == {}


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_interpolate_forward_and_backward(mode):
    class Up(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.nn.Conv2d(2, 2, 1)

        def forward(self, x):
            kw = {} if mode == "nearest" else {"align_corners": False}
            return torch.nn.functional.interpolate(self.c(x), scale_factor=2.0, mode=mode, **kw)
    _train_check(Up, torch.randn(1, 2, 4, 5))


@pytest.mark.parametrize("make", [
    lambda: torch.nn.Sequential(torch.nn.GroupNorm(4, 8), torch.nn.ELU(), torch.nn.Conv2d(8, 4, 1)),
    lambda: torch.nn.Sequential(torch.nn.Conv2d(8, 4, 1), torch.nn.AvgPool2d(2), torch.nn.AdaptiveAvgPool2d(1)),
    lambda: torch.nn.Sequential(torch.nn.Conv2d(8, 4, 1), torch.nn.AdaptiveAvgPool2d(2)),
], ids=["group_norm_elu", "avg_pool", "adaptive_avg_pool"])
def test_group_norm_and_average_pools_train(make):
    _train_check(make, torch.randn(2, 8, 6, 6))


def test_a_seven_by_seven_depthwise_convolution_trains_fused():
    """ConvNeXt's block: the weight gradient of a 7x7 depthwise convolution is 49 sibling reductions of one
    gradient, each with a window of the input; merged into one kernel they ran out of scalar registers and the
    whole backward ran eagerly. Merging stops at ``fusion.MAX_MERGED_INPUTS`` tensors."""
    _train_check(lambda: torch.nn.Sequential(torch.nn.Conv2d(8, 8, 7, padding=3, groups=8), torch.nn.GELU()),
                 torch.randn(2, 8, 9, 9))
