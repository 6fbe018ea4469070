"""torch-grouped: fresh random inputs against the fp64 reference (plain, EP, Llama-4's weight
on the input), remote rows that grouped_mm leaves unwritten cannot leak into the output,
no host sync (one Dynamo graph), and no full-size fp32 or where/index_add glue."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from moe_lab import backends
from moe_lab.backends import torch_grouped as TG
from moe_lab.backends.torch_ref import torch_moe
from moe_lab.measuring.correctness import (THRESHOLDS, check_backend, make_inputs, make_weights,
                                 reference, rel_err)
from moe_lab.core.problems import make_problem
from moe_lab.cost.roofline import cost

COMBINES = ["bag", "bmm"]
PLAIN = "custom:H=48,I=40,E=8,k=2"
DEEP = "custom:H=64,I=24,E=16,k=4,router=deepseek"
LLAMA = "custom:H=32,I=16,E=4,k=1,router=llama4"

# (model, tp, ep, ep_rank, force): force "none" routes every slot to other ranks' experts,
# "all" every slot to this rank's experts, None leaves the random routing
CASES = [
    (PLAIN, 1, 1, 0, None),
    (DEEP, 1, 1, 0, None),
    (PLAIN, 4, 4, 0, None),
    (PLAIN, 4, 4, 3, None),
    (DEEP, 8, 8, 5, None),
    (PLAIN, 4, 4, 1, "none"),
    (PLAIN, 4, 4, 2, "all"),
    (DEEP, 4, 4, 3, "all"),
    (LLAMA, 1, 1, 0, None),
    (LLAMA, 4, 4, 2, None),
    (LLAMA, 4, 4, 1, "none"),
    (LLAMA, 4, 4, 3, "all"),
]


def _point(model, T, dtype, tp, ep, rank, force, seed=0):
    prob = make_problem(model, T, dtype, tp, ep, rank)
    assert backends.get("torch-grouped").supports(prob, "cpu")[0]
    w = make_weights(prob, "cpu", seed)
    inp = make_inputs(prob, "cpu", seed + 1, ensure_local=force is None)
    if force is not None:  # distinct experts per token, all local or all remote
        lo, n, E, k = prob.first_local_expert, prob.local_experts, prob.experts, prob.topk
        g = torch.Generator().manual_seed(seed + 2)
        pool = (torch.arange(lo, lo + n) if force == "all"
                else torch.tensor([e for e in range(E) if not lo <= e < lo + n]))
        assert len(pool) >= k
        ids = torch.stack([pool[torch.randperm(len(pool), generator=g)[:k]] for _ in range(T)])
        inp.topk_ids = ids.to(torch.int32)
    local = prob.expert_map()[inp.topk_ids.long()] if ep > 1 else inp.topk_ids
    if force == "none":
        assert (local < 0).all()
    if force == "all":
        assert (local >= 0).all()
    return prob, w, inp, reference(prob, w, inp)


def _poisoning_grouped_mm(real, value, poisoned):
    """torch._grouped_mm whose output rows past offs[-1] (which it does not write) are
    `value`: what the real kernel may leave there."""
    def wrapper(a, b, *args, offs=None, **kw):
        out = real(a, b, *args, offs=offs, **kw)
        end = int(offs[-1])  # a test may sync; the backend may not
        out[end:] = value
        poisoned.append(out.shape[0] - end)
        return out
    return wrapper


@pytest.mark.parametrize("combine", COMBINES)
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("T", [1, 3, 64])
@pytest.mark.parametrize("model,tp,ep,rank,force", CASES)
def test_matches_fp64_reference(model, tp, ep, rank, force, T, dtype, combine):
    prob, w, inp, ref = _point(model, T, dtype, tp, ep, rank, force, seed=T)
    out = TG.grouped_moe_fn(prob, w, combine)(*inp.args())
    assert out.shape == ref.shape and out.dtype == prob.torch_dtype
    err = rel_err(out, ref)
    assert err <= THRESHOLDS[dtype], (combine, err)
    if force == "none":  # nothing local: exactly zero, not merely small
        assert ref.abs().max() == 0 and out.abs().max() == 0


@pytest.mark.parametrize("T", [1, 3, 64])
@pytest.mark.parametrize("model,tp,ep,rank,force", CASES)
def test_registered_backend_passes_check(model, tp, ep, rank, force, T):
    prob, w, inp, ref = _point(model, T, "bf16", tp, ep, rank, force, seed=100 + T)
    row = check_backend(backends.get("torch-grouped"), prob, w, inp, ref, "cpu")
    assert row["status"] == "ok", row


@pytest.mark.parametrize("combine", COMBINES)
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("model,tp,ep,rank,force", [c for c in CASES if c[2] > 1])
def test_unwritten_rows_past_the_last_offset_never_leak(monkeypatch, model, tp, ep, rank, force,
                                                        value, combine):
    prob, w, inp, ref = _point(model, 64, "bf16", tp, ep, rank, force, seed=7)
    poisoned = []
    poison = _poisoning_grouped_mm(torch._grouped_mm, value, poisoned)
    monkeypatch.setattr(torch, "_grouped_mm", poison)
    out = TG.grouped_moe_fn(prob, w, combine)(*inp.args())
    # both GEMMs left every remote pair's row unwritten, and now poisoned; the bag combine
    # also its spare row (the bmm's zero row is always inside a group)
    remote = int((prob.expert_map()[inp.topk_ids.long()] < 0).sum())
    assert poisoned == [remote + (combine == "bag")] * 2
    assert (remote == 0) == (force == "all")
    assert torch.isfinite(out).all()
    assert rel_err(out, ref) <= THRESHOLDS["bf16"]
    if force == "none":
        assert out.abs().max() == 0


@pytest.mark.parametrize("combine", COMBINES)
@pytest.mark.parametrize("model,tp,ep,rank", [(PLAIN, 1, 1, 0), (DEEP, 8, 8, 3), (LLAMA, 4, 4, 1)])
def test_one_graph_no_host_sync(model, tp, ep, rank, combine):
    """Dynamo breaks the graph at .item(), .tolist(), nonzero and boolean-mask indexing
    (data-dependent shapes or host reads): zero breaks means none of them is in the call."""
    prob, w, inp, _ = _point(model, 16, "bf16", tp, ep, rank, None)
    torch._dynamo.reset()
    ex = torch._dynamo.explain(TG.grouped_moe_fn(prob, w, combine))(*inp.args())
    assert ex.graph_break_count == 0, ex.break_reasons
    assert ex.graph_count == 1


def test_the_sync_check_catches_a_host_sync():
    """The reference loop reads counts on the host (.tolist()): explain must see it."""
    _, w, inp, _ = _point(PLAIN, 16, "bf16", 1, 1, 0, None)
    torch._dynamo.reset()

    def loop(x, tw, ids):
        return torch_moe(x, w.w1, w.w2, tw, ids)
    assert torch._dynamo.explain(loop)(*inp.args()).graph_break_count > 0


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:  # moves no data
            return out
        for t in (out if isinstance(out, (tuple, list)) else [out]):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.ops.append((func.overloadpacket.__name__, t.dtype, t.numel()))
        return out


@pytest.mark.parametrize("combine", COMBINES)
@pytest.mark.parametrize("model,tp,ep,rank", [(PLAIN, 1, 1, 0), (DEEP, 8, 8, 3), (LLAMA, 4, 4, 1)])
def test_glue_is_bf16_without_full_size_where_or_index_add(model, tp, ep, rank, combine):
    """Every floating tensor of the call as large as [T*k, I] is in the activation dtype
    and comes from the gather, a GEMM, silu*mul or the combine: no fp32 copy, multiply,
    where or index_add over the sorted rows."""
    T = 64
    prob, w, inp, ref = _point(model, T, "bf16", tp, ep, rank, None)
    rec = _Recorder()
    with rec:
        out = TG.grouped_moe_fn(prob, w, combine)(*inp.args())
    assert rel_err(out, ref) <= THRESHOLDS["bf16"]
    big = [op for op in rec.ops if op[2] >= T * prob.topk * prob.inter]
    assert big and all(dt == torch.bfloat16 for _, dt, _ in big), big
    allowed = {"index_select", "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only",
               "_grouped_mm", "silu", "mul_", "bmm", "sum"}
    assert {name for name, _, _ in big} <= allowed, big
    banned = {"index_add", "index_add_", "where", "masked_fill", "masked_fill_", "_to_copy"}
    assert not banned & {name for name, _, _ in big}


def test_intermediates_declared_for_the_roofline():
    for name, combine in (("torch-grouped", "bag"), ("torch-grouped-bmm", "bmm")):
        cls = backends.backend_class(name)
        assert cls.combine == combine and cls.intermediates == TG.INTERMEDIATES[combine]
    for combine, inter in TG.INTERMEDIATES.items():
        for what, rows, width, eb in inter:
            assert rows in ("all", "local", "tokens") and width in ("H", "I", "2I")
            assert eb == "act" or isinstance(eb, (int, float))
        assert not any(eb == 4 for *_, eb in inter), combine  # no fp32 intermediate
    prob = make_problem("deepseek-r1", 4096, "bf16", 8)
    c = cost(prob, backend="torch-grouped")
    N, H, I = 4096 * 8, 7168, 256
    assert c.inter_bytes == 2 * 2 * N * (H + 2 * I + I + I + H)


def test_unknown_combine_is_refused():
    prob, w, _, _ = _point(PLAIN, 3, "bf16", 1, 1, 0, None)
    with pytest.raises(ValueError, match="combine"):
        TG.grouped_moe_fn(prob, w, "index_add")


def test_the_bmm_backend_passes_the_check():
    from moe_lab.measuring.correctness import check_problem
    from moe_lab.core.problems import make_problem
    prob = make_problem("custom:H=64,I=32,E=8,k=2", 5, "bf16", tp=4, ep=4, ep_rank=1)
    rows = check_problem(prob, ["torch-grouped", "torch-grouped-bmm"], "cpu", 3)
    assert [r["status"] for r in rows] == ["ok", "ok"], rows
