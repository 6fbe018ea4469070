"""The README's ledger formulas are the ledger's own (moe_lab.cost.ledger.phase_bytes_flops):
each phase's bytes and flops as the README writes them, evaluated at real shapes, equal what
the code computes (scale bytes, the README's S, left out on both sides), so the formulas a
reader checks a floor with cannot drift from the floors the workbook draws."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from moe_lab.core.problems import make_problem
from moe_lab.cost import ledger

ROOT = Path(__file__).resolve().parents[1]


def _readme_formulas() -> tuple[dict, dict]:
    """{phase: [expression, ...]} and the element sizes (a, q/w fp8 and else) the README
    states, in Python syntax (· is *, a number before a symbol multiplies it)."""
    text = " ".join((ROOT / "README.md").read_text().split())
    part = text[text.index("T tokens, H hidden"):text.index("`gaps` = median")]
    sizes = dict(a=int(re.search(r"a = (\d) \(bf16\)", part).group(1)),
                 zero_at_k1="0 at k = 1" in part)
    m = re.search(r"q = w = (\d) for fp8 \(else (\d)\)", part)
    sizes.update(fp8=int(m.group(1)), other=int(m.group(2)))
    out: dict[str, list[str]] = {}
    phase = None
    for tok in re.split(r"(`[^`]+`)", part):
        words = re.findall(r"\b(quant|act|align|combine|gemm1|gemm2)\b", tok)
        if not tok.startswith("`"):
            if words:
                phase = words[-1] if tok.rstrip().endswith(words[-1]) else phase
            continue
        expr = re.sub(r"(\d)([A-Za-z(])", r"\1*\2", tok.strip("`").replace("·", "*"))
        out.setdefault(phase, []).append(expr)
    return out, sizes


def test_the_readme_states_a_formula_for_every_floored_phase():
    formulas, _ = _readme_formulas()
    assert set(formulas) == {"quant", "act", "align", "combine", "gemm1", "gemm2"}


@pytest.mark.parametrize("model,tokens,dtype,ep", [
    ("llama4-scout-16e", 64, "bf16", 1), ("deepseek-r1", 256, "bf16", 8),
    ("qwen3-235b-a22b", 16, "fp8-block128", 8), ("deepseek-r1", 4096, "fp8-channel", 1)])
def test_the_readme_formulas_are_the_ledgers(monkeypatch, model, tokens, dtype, ep):
    monkeypatch.setattr(ledger, "scale_bytes", lambda *a: 0)  # the README's S, both sides
    monkeypatch.setattr(ledger, "act_scale_bytes", lambda *a: 0)
    formulas, sizes = _readme_formulas()
    p = make_problem(model, tokens, dtype, tp=8, ep=ep)
    hit, pairs = 11.0, 0.7 * tokens * p.topk
    fp8, zero_at_k1 = p.is_fp8, sizes["zero_at_k1"]
    env = dict(T=p.tokens, H=p.hidden, I=p.inter, k=p.topk, rows=p.tokens * p.topk,
               pairs=pairs, hit=hit, S=0, min=min, a=sizes["a"],
               q=sizes["fp8"] if fp8 else sizes["other"], w=sizes["fp8"] if fp8 else sizes["other"])
    ev = {ph: [eval(e, {}, env) for e in es] for ph, es in formulas.items()}  # noqa: S307
    for gathered in (False, True):
        code = ledger.phase_bytes_flops(p, hit, pairs, gathered=gathered)
        assert code["quant"][0] == (ev["quant"][0] if fp8 else 0)
        assert code["act"][0] == ev["act"][0]
        assert code["align"][0] == ev["align"][0] + (ev["align"][1] if gathered else 0)
        assert code["combine"][0] == (ev["combine"][1] if gathered else
                                      0 if p.topk == 1 and zero_at_k1 else ev["combine"][0])
        for g in ("gemm1", "gemm2"):
            assert code[g] == pytest.approx((ev[g][0], ev[g][1]), rel=1e-12), g
