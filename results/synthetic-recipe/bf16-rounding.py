"""Recipe 4 on the 1B shapes, which conditioning.py cannot hold in float64 beside their f32 copies: the bf16 checkpoint
run in float64 (the truth) and in bf16, its vocabulary cut to 32,768 (and its special ids inside it).
    .venv/bin/python results/synthetic-recipe/bf16-rounding.py MODEL..."""
import dataclasses, sys, tempfile, time
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM
from harness.accuracy import accuracy
from linnet_core import checkpoint
from linnet_core.models import get_model
torch.set_num_threads(2)
for name in sys.argv[1:]:
    t = time.time()
    entry = get_model(name)
    config = dataclasses.replace(entry.config, vocab_size=32_768, bos_token_id=1, eos_token_id=2)
    with tempfile.TemporaryDirectory() as d:
        ckpt = checkpoint.synthetic_checkpoint(entry.id, config, "bfloat16", cache=Path(d))
        probe = torch.randint(0, 20_000, (1, 256), generator=torch.Generator().manual_seed(1))
        def logits(dtype):
            model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=dtype, attn_implementation="eager").eval()
            with torch.no_grad():
                return model(probe).logits[0].double().numpy()
        truth = logits(torch.float64)
        bf16 = logits(torch.bfloat16)
    a = accuracy(truth, bf16)
    lp = torch.from_numpy(truth).log_softmax(-1)
    print(f"{name} (vocabulary cut to 32768) recipe 4: spread {truth.std(-1).mean():.2f} entropy {-(lp.exp()*lp).sum(-1).mean():.2f} "
          f"self {(truth.argmax(-1) == probe[0].numpy()).mean():.2f} | bf16 dist {abs(truth - bf16).max():.3f} kl {a.kl_mean:.2e} "
          f"top1 {a.top1_agree:.2f} ({time.time() - t:.0f} s)", flush=True)
