"""The cache check's two figures on a model, by dtype and attention: how far transformers' cached decode is from its own
full forward (rounding), and how far the decoded tokens computed alone are (what an ignored cache gives).
    .venv/bin/python results/reference-check/context.py MODEL DTYPE...
Each line: the difference, the context's effect, their ratio, for 3 random 8-token prompts."""
import sys, torch, numpy as np
from harness.registry import get_model
from linnet_core.checkpoint import synthetic_checkpoint
from transformers import AutoModelForCausalLM, DynamicCache
from runners._transformers import check_cached_decode, cache_keyword, forward
import runners._transformers as rt
rt.CONTEXT_SHARE, rt.F32_TOLERANCE = float("inf"), float("inf")  # measure, never refuse
name = sys.argv[1]
entry = get_model(name)
ckpt = synthetic_checkpoint(entry.id, entry.config, entry.checkpoint_dtype)
rng = np.random.default_rng(0)
for dtype in sys.argv[2:]:
    td = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    for impl in ("eager", "sdpa"):
        model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=td, attn_implementation=impl).eval()
        kw = cache_keyword(model)
        with torch.no_grad():
            for trial in range(3):
                toks = [int(t) for t in rng.integers(0, 1000, 8)]
                d, _ = check_cached_decode(model, toks, dtype, lambda ids, s, c: forward(model, kw, ids, c), lambda: DynamicCache(config=model.config))
                full = model(input_ids=torch.tensor([toks]), use_cache=False).logits[0].float()
                alone = model(input_ids=torch.tensor(toks[4:])[:, None], use_cache=False).logits[:, 0].float()
                ctx = (alone - full[4:]).abs().max()
                print(name, dtype, impl, f"diff {d:.3g}  context {ctx:.3g}  ratio {d/ctx:.3g}", flush=True)
