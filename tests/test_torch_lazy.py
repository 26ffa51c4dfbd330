"""dvmlang.torch.lazy() (eager torch code fused on observation), torch in -> torch out for @graph / ops /
dvmlang.tensor, and dvmlang.torch.custom_op (issue 14). Every result is checked against torch eager."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dvmlang  # noqa: E402
import dvmlang.language as dl  # noqa: E402
import dvmlang.ops as ops  # noqa: E402
import dvmlang.torch as dvt  # noqa: E402
from dvmlang.fuser.lazy.runtime import fresh_runtime  # noqa: E402
from dvmlang.torch import TorchLazyError  # noqa: E402


def mlp(x, w1, b1, w2, b2):
    return torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(x, w1, b1)), w2, b2)


def norm_chain(x, g, b):
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b)
    return torch.log_softmax(torch.softmax(h * 3, -1) + h, -1)


def attention(x, wq, wk, wv, wo, heads=2):
    B, S, D = x.shape
    q = (x @ wq).view(B, S, heads, D // heads).transpose(1, 2)
    k = (x @ wk).view(B, S, heads, D // heads).transpose(1, 2)
    v = (x @ wv).view(B, S, heads, D // heads).transpose(1, 2)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // heads), -1)
    return x + (a @ v).transpose(1, 2).reshape(B, S, D) @ wo


def _weights(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) * 0.3 for s in shapes]


def _observe(fn, *args):
    """fn under the lazy mode, observed once with .numpy(); the session and the values."""
    with torch.no_grad(), dvt.lazy() as s:
        out = fn(*args)
        assert isinstance(out, dvt.LazyTorchTensor)
        assert len(s.stats.flushes) == 0  # nothing ran yet
        val = out.numpy().copy()
    return s, val


@pytest.mark.parametrize("case", ["mlp", "norm", "attention"])
def test_lazy_equals_eager_in_one_flush(case):
    if case == "mlp":
        fn, args = mlp, _weights((6, 16), (32, 16), (32,), (8, 32), (8,))
    elif case == "norm":
        fn, args = norm_chain, _weights((5, 24), (24,), (24,))
    else:
        fn, args = attention, _weights((2, 8, 16), (16, 16), (16, 16), (16, 16), (16, 16))
    with torch.no_grad():
        ref = fn(*args)
    dvt.reset_stats()
    with fresh_runtime():  # (no program an earlier test compiled: this one counts its builds)
        s, val = _observe(fn, *args)
    np.testing.assert_allclose(val, ref.numpy(), rtol=1e-4, atol=1e-5)
    assert [f.reason for f in s.stats.flushes] == ["observe"]  # the whole block: one flush, one launch
    assert s.stats.launches == 1
    st = dvt.stats()
    assert st["launches"] == 1 and st["fallback_ops"] == {} and st["cycles"] > 0
    assert st["builds"] >= 1 and st["encodes"] >= 1


def test_results_keep_eager_metadata():
    x, w = _weights((4, 8), (4, 8))
    with torch.no_grad(), dvt.lazy():
        y = torch.exp(x.t() @ w)
        z = y.to(torch.bfloat16)
        assert y.shape == (8, 8) and y.dtype is torch.float32 and y.stride() == (8, 1)
        assert z.dtype is torch.bfloat16
        torch.testing.assert_close(z, torch.exp(x.t() @ w).to(torch.bfloat16))


@pytest.mark.parametrize("how", ["item", "print", "tolist", "numpy", "if"])
def test_each_observation_point_flushes(how, capsys):
    (x,) = _weights((3, 5))
    with torch.no_grad(), dvt.lazy() as s:
        y = (x * 2 + 1).sum()
        if how == "item":
            got = y.item()
        elif how == "print":
            print(y)
            got = float(capsys.readouterr().out.split("(")[1].split(")")[0])
        elif how == "tolist":
            got = y.tolist()
        elif how == "numpy":
            got = float(y.numpy())
        else:
            got = 1.0 if y > -1e9 else 0.0
            assert got == 1.0
            got = (x * 2 + 1).sum().item()
        assert s.stats.flushes[0].reason == "observe"
        n = len(s.stats.flushes)
        y.item()  # a computed value: observing it again flushes nothing
        assert len(s.stats.flushes) == n
    assert got == pytest.approx((x * 2 + 1).sum().item(), rel=1e-5)


def test_uncovered_op_flushes_then_runs_in_torch_and_is_counted():
    (x,) = _weights((4, 6))
    dvt.reset_stats()
    with torch.no_grad(), dvt.lazy() as s:
        y = torch.exp(x) * 2
        z = torch.logcumsumexp(y, 1)  # no dvmlang lowering in the table: flush, then torch
        assert s.stats.flushes[-1].reason == "unfusible" and "logcumsumexp" in s.stats.flushes[-1].detail
        w = z + 1
        out = w.numpy().copy()
    np.testing.assert_allclose(out, (torch.logcumsumexp(torch.exp(x) * 2, 1) + 1).numpy(), rtol=1e-5)
    assert dvt.stats()["fallback_ops"] == {"logcumsumexp.default": 1}


def test_inplace_on_a_view_updates_the_base_as_eager():
    def prog(x):
        a = x * 2  # pending
        v = a[1:3]
        v.add_(5)  # in place through a view: the base sees it
        a.t()[0].mul_(10)
        r = a.view(-1)
        r[3] = -1.0  # index_put / copy_ through another view
        return a, v, a.sum()
    (x,) = _weights((4, 6))
    with torch.no_grad():
        ea, ev, es = prog(x.clone())
        with dvt.lazy():
            la, lv, ls = prog(x.clone())
            assert torch.equal(la, ea) and torch.equal(lv, ev)
            assert ls.item() == pytest.approx(es.item(), rel=1e-6)
            assert lv.materialise().untyped_storage().data_ptr() == la.materialise().untyped_storage().data_ptr()


def test_views_see_later_inplace_writes_and_pending_reads_do_not():
    def prog(x):
        a = torch.exp(x)
        t = a.transpose(0, 1)  # a lazy view of a pending value
        early = t * 1  # read before the write
        a.mul_(3)
        return early, t + 0, t
    (x,) = _weights((3, 4))
    with torch.no_grad():
        ref = prog(x.clone())
        with dvt.lazy() as s:
            got = prog(x.clone())
            for g, r in zip(got, ref):
                torch.testing.assert_close(g, r)
    assert "hazard" in [f.reason for f in s.stats.flushes]


def test_inplace_on_an_input_after_a_pending_read():
    (x,) = _weights((5,))
    x0 = x.clone()
    with torch.no_grad(), dvt.lazy():
        y = x * 2  # reads x's memory lazily
        x.add_(1)  # runs in torch: the pending read is flushed first
        z = x * 2
        torch.testing.assert_close(y, x0 * 2)
        torch.testing.assert_close(z, (x0 + 1) * 2)


def test_clone_does_not_alias():
    (x,) = _weights((4,))
    x0 = x.clone()
    with torch.no_grad(), dvt.lazy():
        c = x.clone()
        c.add_(1)
        assert torch.equal(x, x0) and torch.equal(c, x0 + 1)


def test_autograd_is_refused_with_a_clear_error():
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    with pytest.raises(TorchLazyError, match="requires grad.*torch.no_grad"):
        with dvt.lazy():
            lin(x)
    with torch.no_grad(), dvt.lazy():
        torch.testing.assert_close(lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias))


def test_values_outlive_the_block_and_factories_run_in_torch():
    (x,) = _weights((3, 3))
    with torch.no_grad(), dvt.lazy() as s:
        y = torch.relu(x - 0.1) + torch.ones(3, 3)
    assert [f.reason for f in s.stats.flushes] == ["exit"]
    torch.testing.assert_close(y * 2, (torch.relu(x - 0.1) + 1) * 2)  # eager ops on it after the block


def test_trace_sees_lazy_launches():
    (x,) = _weights((4, 16))
    with torch.no_grad(), dvmlang.trace() as t, dvt.lazy():
        torch.softmax(x, -1).sum().item()
    assert t.launches and all(launch.name.startswith("lazy") for launch in t.launches)


# ---- torch in, torch out ----------------------------------------------------------------------------------

def test_graph_ops_and_tensor_take_torch_and_return_torch():
    @dvmlang.graph
    def f(x, w):
        return ops.softmax(x @ w, -1)
    x, w = _weights((4, 8), (8, 16))
    y = f(x, w)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, torch.softmax(x @ w, -1), rtol=1e-4, atol=1e-5)
    z = ops.exp(x)
    assert isinstance(z, torch.Tensor)
    torch.testing.assert_close(z, torch.exp(x))
    np.testing.assert_allclose(f(x.numpy(), w.numpy()), y.numpy(), rtol=1e-6)  # numpy in, numpy out
    t = dvmlang.tensor(x)
    assert np.shares_memory(t.numpy(), x.numpy())  # zero-copy
    assert isinstance(ops.add(t, x), dvmlang.LazyTensor)  # next to dvmlang values, torch is an array


def test_bfloat16_zero_copy_both_ways():
    x = torch.randn(4, 8).bfloat16()
    t = dvmlang.tensor(x)
    assert t.dtype.name == "bfloat16" and np.shares_memory(t.numpy(), x.view(torch.int16).numpy())
    y = ops.mul(x, 2)
    assert y.dtype is torch.bfloat16
    torch.testing.assert_close(y, x * 2)
    arr = np.zeros(3, dtype=dvmlang.dtypes.bfloat16.np)
    from dvmlang.fuser.foreign import from_numpy
    out = from_numpy(arr, x)
    out.fill_(1.5)
    assert float(arr[0]) == 1.5  # the torch tensor is over the numpy array


# ---- kernels as torch ops ---------------------------------------------------------------------------------

@dvmlang.kernel
def _scaled_add(x_ptr, y_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    m = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=m) * 2 + dl.load(y_ptr + offs, mask=m), mask=m)


@dvt.custom_op("dvmlang_test::scaled_add", outputs=lambda x, y: [(x.shape, x.dtype)])
def scaled_add(x, y, out):
    n = x.numel()
    _scaled_add[(dl.cdiv(n, 256),)](x, y, out, n, BLOCK=256)


def test_custom_op_eager_compile_fullgraph_and_lazy():
    x, y = _weights((4, 100), (4, 100))
    dvt.reset_stats()
    torch.testing.assert_close(scaled_add(x, y), 2 * x + y)
    assert dvt.stats()["launches"] == 1
    assert dvt.stats()["cycles"] > 0 and dvt.stats()["simulated_us"] > 0
    f = torch.compile(lambda a, b: torch.relu(scaled_add(a, b)) + 1, backend="dvmlang", fullgraph=True)
    dvt.reset_stats()
    with torch.no_grad():
        torch.testing.assert_close(f(x, y), torch.relu(2 * x + y) + 1)
    s = dvt.stats()
    assert s["fallback_ops"] == {} and s["launches"] == 2  # the custom op's kernel, then the fused relu + 1
    assert "custom op scaled_add.default" in str(dvt.explain(lambda a, b: scaled_add(a, b) * 2, x, y))
    dvt.reset_stats()
    with torch.no_grad(), dvt.lazy() as s:
        z = torch.exp(scaled_add(x * 3, y))  # flushes x * 3, runs the kernel, exp is pending again
        torch.testing.assert_close(z, torch.exp(6 * x + y))
    assert "scaled_add.default" not in dvt.stats()["fallback_ops"]  # a dvmlang launch, not a torch fallback
    assert dvt.stats()["launches"] == sum(f.launches for f in s.stats.flushes) + 1


def test_custom_op_fake_tensor_opcheck():
    x, y = _weights((3, 7), (3, 7))
    torch.library.opcheck(scaled_add, (x, y))
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        out = scaled_add(torch.empty(5, 9), torch.empty(5, 9))
        assert out.shape == (5, 9) and out.dtype is torch.float32


def test_custom_op_declaration_errors():
    with pytest.raises(dvt.CustomOpError, match="namespace::op"):
        dvt.custom_op("noname", outputs=lambda x: [(x.shape, x.dtype)])
    bad = dvt.custom_op("dvmlang_test::bad_outputs", outputs=lambda x: [x.shape])(lambda x, out: None)
    with pytest.raises(dvt.CustomOpError, match=r"\(shape, torch dtype\)"):
        bad(torch.ones(2))


def test_custom_op_redefined_by_a_module_run_again():
    again = dvt.custom_op("dvmlang_test::scaled_add", outputs=lambda x, y: [(x.shape, x.dtype)])(scaled_add.launcher)
    assert again is scaled_add  # the same torch op, now running this launcher
    with pytest.raises(dvt.CustomOpError, match="already defined"):
        dvt.custom_op("dvmlang_test::scaled_add", outputs=lambda x: [(x.shape, x.dtype)])(lambda x, out: None)
