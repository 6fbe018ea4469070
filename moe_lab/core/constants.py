"""Pure-data constants that the verbs' `configure(parser)` reads, kept free of torch and
pandas: `moe-lab VERB --help` must not load torch (3-8 s before). Each is defined here
once and re-exported by the module that owns its meaning (core.problems, correctness,
tuning, tuning_search, aiter_tables)."""
from __future__ import annotations

# fp8 schemes (moe_lab.quant): fp8 weights and activations inside the layer; the layer's
# input and output (x, out) stay in the activation dtype, bf16
FP8_SCHEMES = ("fp8-tensor", "fp8-channel", "fp8-block128")
# every dtype a point can take: the keys of core.problems.DTYPES and correctness.THRESHOLDS
DTYPE_NAMES = ("bf16", "fp16", "fp32") + FP8_SCHEMES

# the backends with launch configurations `moe-lab tune` searches (Backend.tunable; the
# --help of --config and tune --backend names them)
TUNABLE_BACKENDS = ("aiter-triton", "aiter-triton-silu", "vllm")
# moe_lab.measuring.tuning: the token counts a tuned file holds by default: the keys of the
# published tunings of this kernel for the H200 (vLLM's shipped files), and 8192; the text
# that counts them (README, `tune --help`) takes len() of these
PUBLISHED_H200_KEYS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048,
                       3072, 4096)
TUNE_TOKENS = PUBLISHED_H200_KEYS + (8192,)
# issue 41 item 1: the token counts vLLM's fused MoE is swept at, at every seed shape and scheme,
# beside the workbook's own layers (scripts/device_vllm.sh's default TOKENS; tuned.left)
SEED_SWEEP_TOKENS = (1, 16, 64, 256, 1024, 2048, 4096, 8192)
# the verbs' defaults where no --models, --tokens, --modes or --ep is given, per machine kind
# (sweep, check, tune; their --help and the README's main-job sentence state these)
# the models of the two upstream PRs (data/claims/sources), core.problems.PRESETS: on a GPU
SEED_MODELS = ("llama4-scout-16e", "llama4-maverick-128e", "deepseek-r1", "qwen3-235b-a22b")
CPU_MODELS = ("qwen3-30b-a3b",)
SWEEP_TOKENS = {"gpu": "1-8192", "cpu": "1-64"}      # sweep --tokens
SWEEP_MODES = {"gpu": "eager,graph", "cpu": "eager"}  # sweep --modes
EP_DEFAULT = {"gpu": "1,8", "cpu": "1"}              # sweep and tune --ep
# the tensor-parallel size without --tp (every verb) or tp= (ml.check, ml.measure, ml.profile,
# eager_split.split_point, analysis.devices.claim_shapes): every seed claim is a TP8 deployment
TP_DEFAULT = 8
# calls profiled per point (profile --iters, ml.profile, split_point, profile_kernels)
PROFILE_ITERS = 5
# the timing budget of a new run: sweep (measuring.sweep.Sweep, `sweep --warmup-ms/--rep-ms/
# --point-timeout`, ml.measure) and tune (measuring.tuning.Tuner, `tune --warmup-ms/--rep-ms`)
SWEEP_WARMUP_MS, SWEEP_REP_MS, POINT_TIMEOUT_S = 10.0, 50.0, 120.0
TUNE_WARMUP_MS, TUNE_REP_MS = 5.0, 20.0
# moe_lab.measuring.tuning_compile.default_compile_workers: on a GPU machine the cores but
# this many (one times, one for the rest), at most COMPILE_WORKERS_MAX
COMPILE_WORKERS_SPARE, COMPILE_WORKERS_MAX = 2, 12
VERIFY_MARGIN = 1.02  # verify: a candidate this much faster than the committed winner is news
# moe_lab.measuring.tuning_search.SearchPlan.rungs: each successive-halving rung's share of rep_ms
SEARCH_RUNGS = (1 / 16, 1 / 4, 1.0)
# moe_lab.measuring.compile: seconds of compile allowed per backend x variant (sweep --compile-budget)
COMPILE_BUDGET_S = 900.0
# moe_lab.analysis.compare: the bootstrap interval's confidence (compare.CONFIDENCE; the noise
# files' `what` text states it)
BOOTSTRAP_CONFIDENCE = 0.95
# and its resamples (compare --resamples, compare.compare's and ratio_interval's n_resamples)
BOOTSTRAP_RESAMPLES = 2000

# moe_lab.claims.implications: the roofline GPU of a claim whose registry configuration names
# none (`claims implications --help` and notebook 04 state it; every perf claim so far is it)
CLAIM_GPU = "mi300x"

# moe_lab.importers.aiter_tables: aiter's checkAllclose and base tuner fail a check above 5% (the
# fmoe tuner: 50%)
AITER_MAX_ERR = 0.05
