"""`moe-lab tune --backend vllm` and `--config default|tuned` against the real vllm 0.26.0
package on the CPU (tests/_vllm_package.py). vLLM's compiled ops are torch stand-ins and
its Triton `fused_moe_kernel` is computed in torch from the arguments vLLM's launcher
passes (tests/test_vllm_api.py's stand-ins, plus the product), so a prepared call runs
through vLLM's own fused_experts_impl, configuration lookup and alignment, and is checked
against the reference like on the GPU. Only the timer is a stand-in (a fixed cost per
launch configuration): which configuration wins is not what is tested, but that the one
the search times is the one vLLM launches, and that the file it writes is the one vLLM's
lookup reads back."""
from __future__ import annotations

import json

import pytest
import torch

from moe_lab.backends import get
from moe_lab.backends import vllm_fused as vb
from moe_lab.storage.configs import ConfigTables, config_for, load_tuned, read_config_path
from moe_lab.core.problems import SEED_MODELS, make_problem
from moe_lab.measuring.timing import Timing
from moe_lab.measuring.tuning import Tuner, read_provenance

from test_vllm_api import (SCHEMES, Launches, _align, _inputs, _weights, h200,  # noqa: F401
                           vllm)

MODEL = "custom:H=128,I=64,E=8,k=2"  # no file of vLLM's: its as-shipped is get_default_config
LAUNCH_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps",
               "num_stages")


class TorchKernel(Launches):
    """vLLM's fused_moe_kernel launches, recorded and computed (bf16): each block of
    BLOCK_SIZE_M (token, slot) rows of `sorted_token_ids` (or, naive, one row per block)
    times its expert's weight, the router weight applied when MUL_ROUTED_WEIGHT, a block
    of expert -1 zeros."""

    def __getitem__(self, grid):
        if not callable(grid):
            return list.__getitem__(self, grid)
        record = Launches.__getitem__(self, grid)

        def launch(*args, **kw):
            record(*args, **kw)
            a = self[-1]
            A, B, C = a["a_ptr"], a["b_ptr"], a["c_ptr"]
            C2 = C.view(-1, C.shape[-1])
            bm, n_valid = a["BLOCK_SIZE_M"], a["num_valid_tokens"]
            n_post = int(a["num_tokens_post_padded_ptr"][0])
            ids, experts = a["sorted_token_ids_ptr"], a["expert_ids_ptr"]
            for m in range(-(-n_post // bm)):
                rows = (torch.tensor([m]) if a["naive_block_assignment"]
                        else ids[m * bm:(m + 1) * bm].long())
                rows = rows[rows < n_valid]
                e = int(experts[m])
                if e == -1:
                    C2[rows] = 0
                    continue
                out = A[rows // a["top_k"]].float() @ B[e].float().T
                if a["MUL_ROUTED_WEIGHT"]:
                    out = out * a["topk_weights_ptr"].flatten()[rows].float()[:, None]
                C2[rows] = out.to(C2.dtype)
        return launch


def _stand_in(mp, fm):
    """vLLM's compiled ops stood in and its kernel computed in torch (returned); the backend
    takes the CPU for a GPU (its gate), as the tuner and the check ask it; vLLM's lookup
    sees an H200 and no user folder."""
    from vllm import _custom_ops as ops
    mp.setattr(fm, "get_device_name_as_file_name", lambda device_id=0: "NVIDIA_H200")
    mp.setattr(fm, "moe_align_block_size", _align)
    mp.setattr(fm, "apply_moe_activation",
               lambda act, out, inp, **kw: out.copy_(torch.nn.functional.silu(
                   inp[:, :out.shape[1]].float()) * inp[:, out.shape[1]:].float()))
    mp.setattr(ops, "moe_sum", lambda inp, out, *a, **k: out.copy_(inp.sum(1)))
    launches = TorchKernel(fm.fused_moe_kernel)
    mp.setattr(fm, "fused_moe_kernel", launches)
    mp.setattr(vb.VllmBackend, "available", lambda self: (True, ""))
    mp.setattr(vb.VllmBackend, "supports", lambda self, p, d: (True, ""))
    mp.delenv(vb.TUNED_FOLDER, raising=False)
    fm.get_moe_configs.cache_clear()
    return launches


@pytest.fixture
def kernel(vllm, monkeypatch):
    fm, _ = vllm
    yield _stand_in(monkeypatch, fm)
    fm.get_moe_configs.cache_clear()


def _launched(launch) -> dict:
    return {k: launch[k] for k in LAUNCH_KEYS}


def _best(T) -> dict:
    """The stand-in timer's fastest configuration at T tokens (one the space holds)."""
    return dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=32 if T < 8 else 64, BLOCK_SIZE_K=128,
                GROUP_SIZE_M=1, num_warps=4, num_stages=3)


class Timer:
    """Stand-in timer: each launch key off the key's best costs a fixed amount; vLLM's
    default costs the most. It runs the call once, so every timed configuration is
    launched through vLLM's code (the launches it made are kept per configuration)."""

    def __init__(self, launches):
        self.launches, self.seen = launches, {}

    def __call__(self, fn, inp, *, config, problem, rep_ms):
        cfg = config["gemm1"]
        key = (json.dumps(cfg, sort_keys=True), problem.tokens)
        if key not in self.seen:  # a configuration's later rungs: the same launches
            n = len(self.launches)
            fn(*inp.args())
            self.seen[key] = [_launched(x) for x in self.launches[n:]]
        best = _best(problem.tokens)
        us = 10.0 + sum(cfg.get(k) != best[k] for k in best) + 1e-3 * len(json.dumps(cfg))
        if "SPLIT_K" in cfg:  # vLLM's get_default_config (its only config with SPLIT_K)
            us = 100.0
        return Timing(us, us, us, 10, False, "stand-in")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, vllm):
    """A vllm search of MODEL at 1 and 16 tokens (vLLM's naive block assignment at 1: T*k*4
    <= E; aligned at 16), through vLLM's code with the stand-ins; its files. The tuner
    takes the CPU for an H200 (the name its files carry). Once for the module."""
    fm, _ = vllm
    keys, tmp = (1, 16), tmp_path_factory.mktemp("tune")
    with pytest.MonkeyPatch.context() as mp:
        timer = Timer(_stand_in(mp, fm))
        tuner = Tuner("vllm", "cpu", tmp / "runs" / "tune-vllm", tmp / "configs",
                      rep_ms=4, warmup_ms=1, progress=False, timer=timer)
        tuner.device_name = "NVIDIA H200"
        win = tuner.run([[make_problem(MODEL, T, "bf16", 1, 1) for T in keys]])
    fm.get_moe_configs.cache_clear()
    return tuner, win, timer, keys


def test_the_tuner_writes_vllms_file_and_vllms_lookup_reads_it_back(tuned, vllm, monkeypatch):
    fm, _ = vllm
    tuner, win, timer, keys = tuned
    p = make_problem(MODEL, keys[0], "bf16", 1, 1)
    name = fm.get_config_file_name(p.local_experts, p.inter, None, None)  # vLLM's, on an H200
    folder = tuner.configs_dir / "vllm"
    assert sorted(x.name for x in folder.iterdir()) == sorted([name, "provenance.json"])
    assert read_provenance(folder)[name]["keys"] == list(keys)  # no _down file: vLLM reads none
    monkeypatch.setenv("VLLM_TUNED_CONFIG_FOLDER", str(folder))
    fm.get_moe_configs.cache_clear()
    got = fm.get_moe_configs(p.local_experts, p.inter, None)  # vLLM's own lookup
    want = {int(r.tokens): json.loads(r.config)["gemm1"] for r in win.itertuples()}
    assert got == want and set(got) == set(keys)
    assert all(cfg == _best(T) for T, cfg in got.items())  # the search found the best
    for r in win.itertuples():  # vLLM as shipped was timed at every key, and beaten
        assert r.default_us == 100.0 and r.median_us < r.default_us


def test_every_timed_candidate_is_what_vllms_kernel_launched(tuned):
    """The search hands vLLM its candidate (override_config): both GEMMs of the call
    launch with it, and vLLM's own choice is what `default` ran."""
    tuner, win, timer, keys = tuned
    assert len(timer.seen) > 50
    for (cfg_js, T), launched in timer.seen.items():
        cfg = json.loads(cfg_js)
        assert len(launched) == 2  # gemm1, gemm2: one configuration for both
        assert all(x == {k: cfg[k] for k in LAUNCH_KEYS} for x in launched)


def test_the_search_space_is_aiter_tritons(vllm):
    """Same space, same coarse pass and fine keys as the aiter-triton tuner, one stage."""
    from moe_lab.backends import aiter_triton
    v, a = get("vllm"), aiter_triton.AiterTritonBackend()
    for dtype in SCHEMES:
        p = make_problem("deepseek-r1", 64, dtype, 8, 1, 0)
        # aiter-triton has no fp8-channel: vLLM's is the space of fp8 without blocks
        same = p if dtype != "fp8-channel" else make_problem("deepseek-r1", 64, "fp8-tensor", 8)
        assert list(v.config_space(p)) == ["gemm1"]
        assert v.config_space(p)["gemm1"] == a.config_space(same)["gemm1"]
        assert len(v.config_space(p)["gemm1"]) > 100
    assert v.coarse_config is a.coarse_config and v.fine_keys == a.fine_keys


@pytest.mark.parametrize("model", SEED_MODELS)
@pytest.mark.parametrize("dtype", SCHEMES)
@pytest.mark.parametrize("ep", [1, 8])
def test_the_tuned_files_carry_vllms_name(vllm, model, dtype, ep):
    fm, _ = vllm
    p = make_problem(model, 64, dtype, 8, ep, 0)
    block = [128, 128] if dtype == "fp8-block128" else None
    want = fm.get_config_file_name(p.local_experts, p.inter, vb.config_dtype(p), block)
    for dev in ("NVIDIA H200", "NVIDIA H200 NVL"):  # the family: one name, as vLLM says
        assert get("vllm").config_files(p, dev) == {"gemm1": want}


def test_vllm_names_every_h200_alike(vllm, monkeypatch):
    fm, _ = vllm
    monkeypatch.setattr(fm, "get_device_name_as_file_name", lambda device_id=0: "NVIDIA_H200_NVL")
    assert fm.get_config_file_name(8, 64, None) == "E=8,N=64,device_name=NVIDIA_H200.json"
    from moe_lab.core.devices import file_device_name  # the one device part of a file name
    assert file_device_name("NVIDIA H200 NVL") == "NVIDIA_H200"
    assert file_device_name("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB_HBM3"


def test_the_default_is_what_vllm_as_shipped_picks(vllm, kernel):
    """default_config is the entry vLLM's lookup gives without a user folder: its shipped
    file's (DeepSeek-R1 fp8-block128 TP8: E=256, N=256 ships) or get_default_config."""
    fm, _ = vllm
    p = make_problem("deepseek-r1", 48, "fp8-block128", 8, 1, 0)
    shipped = fm.get_moe_configs(256, 256, "fp8_w8a8", 128, 128)
    assert shipped  # vLLM ships this shape for the H200
    assert get("vllm").default_config(p) == {"gemm1": shipped[min(shipped, key=lambda m: abs(m - 48))]}
    q = make_problem(MODEL, 48, "bf16", 1, 1)
    assert get("vllm").default_config(q) == {"gemm1": fm.get_default_config(48, 8, 64, 128, 2, None)}


def test_sweep_tuned_makes_vllm_read_the_files_itself_and_default_is_as_shipped(
        tuned, vllm, kernel, monkeypatch):
    """--config tuned: the ConfigTables of the tuned files; the prepared call sets vLLM's
    tuned-config folder and vLLM picks the entry nearest the call's tokens itself; the row
    names the file. --config default beside it (one process, calls interleaved) runs vLLM
    as shipped, a user's folder set aside."""
    fm, _ = vllm
    tuner, win, timer, keys = tuned
    p = make_problem(MODEL, 20, "bf16", 1, 1)
    table = load_tuned("vllm", p, "NVIDIA H200", tuner.configs_dir)
    assert isinstance(table, ConfigTables)
    w = _weights(p)
    x, tw, ti = _inputs(p)
    monkeypatch.setenv("VLLM_TUNED_CONFIG_FOLDER", str(tuner.configs_dir / "vllm"))  # a user's
    default = get("vllm").prepare(p, w)
    tuned_fn = get("vllm").prepare(p, w, config=table)
    name = fm.get_config_file_name(8, 64, None)
    assert tuned_fn.lookup_folder == (tuner.configs_dir / "vllm").resolve()
    assert tuned_fn.row_facts["config_file"].endswith(f"vllm/{name}")
    assert default.row_facts["config_file"] == "default"  # no shipped file for this shape
    ref = None
    for fn, want in ((default, fm.get_default_config(20, 8, 64, 128, 2, None)),
                     (tuned_fn, _best(16)), (default, fm.get_default_config(20, 8, 64, 128, 2, None)),
                     (tuned_fn, _best(16))):  # 20 tokens: the entry of 16 is nearest
        n = len(kernel)
        out = fn(x, tw, ti)
        assert len(kernel) == n + 2
        assert all(_launched(k) == {kk: want[kk] for kk in LAUNCH_KEYS} for k in kernel[n:])
        # the row's launch_config: what vLLM's lookup gave the call (what it launched)
        got = fn.launch_config(20)["gemm1"]
        assert {kk: got[kk] for kk in LAUNCH_KEYS} == _launched(kernel[n])
        ref = out if ref is None else ref
        assert torch.allclose(out.float(), ref.float(), atol=2e-2, rtol=2e-2)
    # through the sweep's own resolution of --config tuned
    monkeypatch.setattr("moe_lab.storage.configs.configs_dir_for", lambda dev: tuner.configs_dir)
    t2, why = config_for("vllm", "tuned", p, "NVIDIA H200")
    assert why == "" and t2.files["gemm1"].name == name
    q = make_problem("custom:H=128,I=32,E=8,k=2", 20, "bf16", 1, 1)  # a shape never tuned
    none, why = config_for("vllm", "tuned", q, "NVIDIA H200")
    assert none is None and "moe-lab tune --backend vllm" in why


def test_a_config_file_of_another_name_goes_through_override(tuned, vllm, kernel, tmp_path):
    tuner, win, timer, keys = tuned
    p = make_problem(MODEL, 5, "bf16", 1, 1)
    src = next((tuner.configs_dir / "vllm").glob("E=*.json"))
    other = tmp_path / "mine.json"
    other.write_text(src.read_text())
    fn = get("vllm").prepare(p, _weights(p), config=read_config_path("vllm", other))
    assert fn.lookup_folder is None and fn.row_facts["config_file"].endswith("mine.json")
    n = len(kernel)
    fn(*_inputs(p))
    assert _launched(kernel[n]) == _best(1)  # 5 tokens: the entry of 1, vLLM's rule
    assert {k: fn.launch_config(5)["gemm1"][k] for k in LAUNCH_KEYS} == _best(1)


def test_warm_tokens_reach_both_of_vllms_block_assignments(vllm):
    be = get("vllm")
    p = make_problem("llama4-maverick-128e", 1, "bf16", 8, 1, 0)  # E=128, k=1
    reps = be.warm_tokens(p, (1, 2, 4, 16, 24, 32, 48, 64, 4096))
    # naive (T*4 <= 128): 1 (n == 1), 2, 16 (n % 16 == 0); aligned: 48 (and 64, 4096 alike)
    assert reps == [1, 2, 16, 48]
    ep = make_problem("deepseek-r1", 1, "bf16", 8, 8, 0)  # EP: always aligned; k=8
    assert be.warm_tokens(ep, (1, 2, 16)) == [1, 2]  # n = 8, then 16 and 128 (both % 16)


def test_every_committed_vllm_file_is_read_by_vllms_lookup_as_written(vllm, monkeypatch):
    """Every shape of issue 41 (analysis.tuned.REQUIRED) has its tuned vLLM file
    committed under data/configs/nvidia-h200/vllm, found by vLLM's own lookup under the name
    vLLM gives that shape, read back entry for entry, and holds every token key of vLLM's
    shipped H200 file for that shape (where it ships one) and 8192."""
    from pathlib import Path
    from moe_lab.analysis.tuned import REQUIRED
    fm, _ = vllm
    folder = Path(__file__).resolve().parents[1] / "data" / "configs" / "nvidia-h200" / "vllm"
    checked = 0
    for _, backend, model, tp, ep, dtype in REQUIRED:
        if backend != "vllm":
            continue
        p = make_problem(model, 64, dtype, tp, ep, 0)
        block = [128, 128] if dtype == "fp8-block128" else None
        name = fm.get_config_file_name(p.local_experts, p.inter, vb.config_dtype(p), block)
        assert (folder / name).is_file(), f"{model} TP{tp} EP{ep} {dtype}: no {name}"
        args = (p.local_experts, p.inter, vb.config_dtype(p)) + ((128, 128) if block else ())
        monkeypatch.delenv("VLLM_TUNED_CONFIG_FOLDER", raising=False)
        fm.get_moe_configs.cache_clear()
        shipped = fm.get_moe_configs(*args) or {}
        monkeypatch.setenv("VLLM_TUNED_CONFIG_FOLDER", str(folder))
        fm.get_moe_configs.cache_clear()
        got = fm.get_moe_configs(*args)
        ours = {int(k): v for k, v in json.loads((folder / name).read_text()).items()}
        assert got == ours, name
        assert set(shipped) | {8192} <= set(got), (name, sorted(set(shipped) - set(got)))
        checked += 1
    fm.get_moe_configs.cache_clear()
    assert checked == sum(r[1] == "vllm" for r in REQUIRED) > 0  # every required shape
