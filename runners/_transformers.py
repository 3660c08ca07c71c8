"""What the transformers rows share: loading the model, passing its cache the way every supported transformers reads
it, and the check that makes the reference prove itself before any row is compared with it.

Why the check: transformers renamed the forward's cache keyword more than once, and a release that does not know the
keyword a caller passes drops it into **kwargs without a word. The H200 image's transformers 5.17 did exactly that with
`cache=`: the reference then computed every token with no context at all, and the harness published distances of ~25
against it. So the reference no longer trusts its stack: at load it decodes a short prompt through its cache and
compares that with one full causal forward of the same tokens, and refuses to be the reference if they differ."""

from __future__ import annotations

import inspect
from typing import Callable

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from runners._torch import torch_dtype
from runners.base import CACHE_CHECKED, RowRefused

# How far a cached decode may be from one full causal forward. The failure this check exists for, a cache the forward
# ignores, computes each fed token alone at position 0, so the bound is a share of how far that is: the largest logit
# difference between the fed tokens computed alone and the full forward (the 0.5B shape: about 20; the twins: 6-10).
# Rounding alone measured at most 0.025 of it (the 0.5B shape in bf16 on a CPU; f16 0.005, f32 6e-6; the twins
# 0.013), where an ignored cache is the whole of it. No fixed bound per dtype tells these apart at every size: 0.5 in
# bf16 refused a correct 24-layer reference (0.555 apart, 0.83 under SDPA), and rounding grows with depth and width,
# while an ignored cache moves the 2-layer twin's logits by only 3-9.
CONTEXT_SHARE = 0.2
# f32 rounds so little that the two paths differ by summation order alone (the 0.5B shape: 1.3e-4): also this bound.
F32_TOLERANCE = 1e-3
CACHE_CHECK_TOKENS = 8  # the short prompt: half prefilled, half fed one token at a time


class BrokenReference(RowRefused):
    """The transformers model's cached decode disagrees with its own full forward: it must not be a reference."""


def load_model(spec, attn_implementation: str, dtype: torch.dtype | None = None, device: str | None = None):
    torch.set_grad_enabled(False)
    model = AutoModelForCausalLM.from_pretrained(
        spec.checkpoint, dtype=dtype or torch_dtype(spec.dtype), attn_implementation=attn_implementation
    )
    return model.to(device or spec.device).eval()


def cache_keyword(model) -> str:
    """The forward keyword this transformers release reads the cache from: `past_key_values` up to 5.2x's deprecation
    of it, `cache` after (5.25 warns on the old name and 5.40 removes it). Read from the forward's signature, since
    a keyword the forward does not name vanishes into **kwargs without an error."""
    parameters = inspect.signature(type(model).forward).parameters
    for keyword in ("cache", "past_key_values"):
        if keyword in parameters:
            return keyword
    raise BrokenReference(f"transformers {transformers_version()}: {type(model).__name__}.forward takes neither "
                          "`cache` nor `past_key_values`, so this code cannot pass it a cache")  # fmt: skip


def forward(step, keyword: str, ids: torch.Tensor, cache, **kwargs) -> torch.Tensor:
    """Logits [1, T, vocab] for ids [1, T] through `step` (the model, or a compiled forward of it), appended to the
    cache passed under `keyword` (cache_keyword)."""
    return step(input_ids=ids, use_cache=True, **{keyword: cache}, **kwargs).logits


def check_tokens(spec) -> list[int]:
    """The tokens the cache check decodes: the probe's (text where the checkpoint has a tokenizer), or the timed
    prompt's where a spec carries a shorter probe (a serving test's)."""
    return max(spec.probe, spec.prompt, key=len)


def check_cached_decode(
    model, prompt: list[int], dtype: str, decode: Callable[[torch.Tensor, int, object], torch.Tensor], new_cache: Callable[[], object]
) -> tuple[float, float]:
    """Feeds prompt[:half] as one prefill and the rest one token at a time through `decode(ids, start, cache)` (logits
    [1, T, vocab]) over a fresh cache from `new_cache()`, and compares those logits with one full causal forward of
    the prompt without any cache, and the fed tokens' logits computed alone (what an ignored cache gives) with the
    same forward. Returns (the cached decode's largest difference, the tokens alone's); raises BrokenReference with a
    one-line reason when the cache is not filled or the first is not far below the second (CONTEXT_SHARE)."""
    tokens = prompt[:CACHE_CHECK_TOKENS]
    assert len(tokens) >= 2, "the cache check needs a prompt of at least 2 tokens"
    device = next(model.parameters()).device
    ids = torch.tensor([tokens], device=device)
    full = model(input_ids=ids, use_cache=False).logits[0].float()  # [T, vocab], no cache anywhere
    cache = new_cache()
    half = len(tokens) // 2
    rows = [decode(ids[:, :half], 0, cache)[0]]
    for t in range(half, len(tokens)):
        rows.append(decode(ids[:, t : t + 1], t, cache)[0])
    cached = torch.cat(rows).float()  # [T, vocab]
    held = cache_length(cache)
    if held is not None and held != len(tokens):
        raise BrokenReference(
            f"transformers {transformers_version()} kept {held} of {len(tokens)} tokens in its cache: its forward "
            "ignored the cache it was given, so it cannot be the reference"
        )
    alone = model(input_ids=ids[0, half:, None], use_cache=False).logits[:, -1].float()  # [T - half, vocab]
    difference = float((cached - full).abs().max())
    context = float((alone - full[half:]).abs().max())
    bound = CONTEXT_SHARE * context if dtype != "f32" else min(CONTEXT_SHARE * context, F32_TOLERANCE)
    if not np.isfinite(difference) or not difference <= bound:
        raise BrokenReference(
            f"transformers {transformers_version()}: decoding through its cache gives logits {difference:.3g} from its "
            f"own full forward, where the tokens alone are {context:.3g} from it (bound {bound:.3g} in {dtype}), so it "
            "cannot be the reference"
        )
    return difference, context


def cache_check_note(difference: float, alone: float) -> str:
    """The row's note of its check_cached_decode figures."""
    return f"{CACHE_CHECKED}: {difference:.2g} apart (the tokens alone: {alone:.2g})"


def cache_length(cache) -> int | None:
    """Tokens a transformers cache holds, or None for a cache that does not say."""
    length = getattr(cache, "get_seq_length", None)
    return int(length()) if callable(length) else None


def transformers_version() -> str:
    import transformers

    return transformers.__version__
