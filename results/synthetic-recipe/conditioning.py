"""How well-conditioned a synthetic-weight recipe is on a full-size shape: how far bf16 and int8 weights move the
logits from a float64 truth, and whether the model still says something (logits spread, greedy decode not stuck).
    .venv/bin/python results/synthetic-recipe/conditioning.py MODEL [RECIPE...]
RECIPE: "recipe" (what linnet_core.checkpoint makes now), or key=value overrides of the candidate recipe (CANDIDATE below): gain, the linear weights' scale
over 1/sqrt(fan-in) (qk for q_proj and k_proj alone, out_gain for o_proj and down_proj alone); embed, the embedding's
over 1/sqrt(hidden); centre and final, the centre of the stored weights of the
norms and of the final norm (Gemma 3 scales by 1 + the stored weight). "gain=2" is synthetic recipe 3,
"" recipe 4. A probe of 256 random tokens."""
import json, sys, tempfile, time, zlib
from pathlib import Path
import torch
from transformers import AutoConfig, AutoModelForCausalLM
from harness.registry import get_model
from linnet_core.checkpoint import Rescaling, synthetic_tensor, tensor_shapes

torch.set_num_threads(2)
CANDIDATE = dict(gain=1.0, qk=None, out_gain=1.0, embed=3.0, bias=0.1, norm=0.2, centre=1.0, final=1.0)


def candidate(name, shape, config, seed, p):
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    if name.endswith("norm.weight"):
        return (p["final"] if name == "model.norm.weight" else p["centre"]) + p["norm"] * x
    if name.endswith(".bias"):
        return p["bias"] * x
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return x * p["embed"] / config.hidden_size**0.5
    out = name.endswith(("o_proj.weight", "down_proj.weight"))
    qk = name.endswith(("q_proj.weight", "k_proj.weight")) and p["qk"] is not None
    return (p["out_gain"] if out else p["qk"] if qk else p["gain"]) * x / shape[-1] ** 0.5


def tensors_for(config, spec):
    shapes = tensor_shapes(config)
    if spec == "recipe":
        rescaling = Rescaling.of(config)
        return {n: synthetic_tensor(n, s, config, 0, False, rescaling) for n, s in shapes.items()}
    p = dict(CANDIDATE, **{k: float(v) for k, v in (kv.split("=") for kv in spec.split(",") if kv)})
    return {n: candidate(n, s, config, 0, p) for n, s in shapes.items()}


def model_in(config, tensors, dtype):
    with tempfile.TemporaryDirectory() as d:
        Path(d, "config.json").write_text(json.dumps(config.to_hf("float32")))
        hf = AutoConfig.from_pretrained(d)
    model = AutoModelForCausalLM.from_config(hf, dtype=dtype, attn_implementation="eager").eval()
    model.load_state_dict({k: v.to(dtype) for k, v in tensors.items()}, strict=False)
    if config.tie_word_embeddings:
        model.tie_weights()
    return model


def int8(t):  # symmetric, per output channel, as the int8 rows quantize
    scale = t.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / 127
    return (t / scale).round().clamp(-127, 127) * scale


def compare(truth, logits):
    logits = logits.double()
    lp, lq = truth.log_softmax(-1), logits.log_softmax(-1)
    kl = (lp.exp() * (lp - lq)).sum(-1).mean().item()
    top1 = (truth.argmax(-1) == logits.argmax(-1)).double().mean().item()
    return (truth - logits).abs().max().item(), kl, top1


def main():
    entry = get_model(sys.argv[1])
    config = entry.config
    probe = torch.randint(0, min(config.vocab_size, 20000), (1, 256), generator=torch.Generator().manual_seed(1))
    for spec in sys.argv[2:] or ["recipe"]:
        start = time.time()
        tensors = tensors_for(config, spec)
        with torch.no_grad():
            truth = model_in(config, tensors, torch.float64)(probe).logits[0]
            lp = truth.log_softmax(-1)
            entropy = -(lp.exp() * lp).sum(-1).mean().item()
            spread = truth.std(-1).mean().item()
            selfpred = (truth.argmax(-1) == probe[0]).double().mean().item()
            bf16 = compare(truth, model_in(config, tensors, torch.bfloat16)(probe).logits[0])
            q = {k: (int8(v) if v.dim() == 2 and "embed" not in k else v) for k, v in tensors.items()}
            i8 = compare(truth, model_in(config, q, torch.float64)(probe).logits[0])
            f32 = model_in(config, tensors, torch.float32)
            out = f32.generate(probe[:, :8], max_new_tokens=48, do_sample=False, min_new_tokens=48)[0, 8:].tolist()
        print(f"{entry.id} {spec:42s} spread {spread:5.2f} entropy {entropy:5.2f} self {selfpred:.2f} | "
              f"bf16 dist {bf16[0]:6.3f} kl {bf16[1]:.2e} top1 {bf16[2]:.2f} | "
              f"int8 dist {i8[0]:6.3f} kl {i8[1]:.2e} top1 {i8[2]:.2f} | greedy distinct {len(set(out))}/48 "
              f"({time.time() - start:.0f} s)", flush=True)


main()
