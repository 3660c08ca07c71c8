"""Hugging Face checkpoints: the tensor names and shapes a model description needs, reading a local directory,
and writing deterministic synthetic weights of the exact shape as a checkpoint every stack can read."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path

from linnet_core.config import ModelConfig
from linnet_core.errors import UserError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SYNTHETIC_RECIPE = 2  # bump when synthetic_tensor or the files a synthetic checkpoint holds change


def tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the Hugging Face layout by name, from the model description; a tied head is not stored."""
    from linnet_core.arch import build_decoder

    return {w.hf_name: w.shape for w in build_decoder(config).all_weights()}


def read_config(path: Path) -> ModelConfig:
    """The ModelConfig of a checkpoint directory; a one-line error naming the file if it is unusable."""
    file = Path(path) / CONFIG_FILE
    try:
        return ModelConfig.from_hf(json.loads(file.read_text()))
    except FileNotFoundError:
        raise UserError(f"{file}: no config.json; --weights needs a Hugging Face checkpoint directory") from None
    except IsADirectoryError:
        raise UserError(f"{file}: is a directory, not a config.json file") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{file}: not valid JSON ({e})") from None
    except (ValueError, TypeError, OverflowError) as e:
        raise UserError(f"{file}: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{file}: unreadable ({e})") from None


def weight_files(path: Path) -> list[Path]:
    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise UserError(f"{path}: no .safetensors files in the checkpoint directory")
    return files


def header_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes from the safetensors headers, without reading the tensors."""
    from safetensors import SafetensorError, safe_open

    shapes = {}
    for file in weight_files(path):
        try:
            with safe_open(file, framework="np") as f:
                shapes |= {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
        except (SafetensorError, OSError, ValueError) as e:
            raise UserError(f"{file}: unreadable safetensors file ({e})") from None
    return shapes


def load_weights(path: Path, framework: str = "np") -> dict:
    """All tensors of a checkpoint directory, checked against the config's names and shapes.

    framework is safetensors' ("np" or "pt"); bf16 tensors need "pt"."""
    from safetensors import SafetensorError, safe_open

    config = read_config(path)
    tensors = {}
    for file in weight_files(path):
        try:
            with safe_open(file, framework=framework) as f:
                for name in f.keys():
                    tensors[name] = f.get_tensor(name)
        except (SafetensorError, OSError, ValueError) as e:
            raise UserError(f"{file}: unreadable safetensors file ({e})") from None
    check_weights(path, config, {k: tuple(t.shape) for k, t in tensors.items()})
    return tensors


def check_weights(path: Path, config: ModelConfig, shapes: dict[str, tuple[int, ...]]) -> None:
    """A one-line error naming the first missing, mis-shaped or unexpected tensor: config.json and the tensors
    must describe the same model (a bias config.json does not announce would otherwise be silently dropped)."""
    expected = tensor_shapes(config)
    shapes = dict(shapes)
    shapes.pop("lm_head.weight", None) if config.tie_word_embeddings else None
    for name, shape in expected.items():
        if name not in shapes:
            raise UserError(f"{path}: checkpoint lacks tensor {name}, which config.json's {config.model_type} needs")
        if tuple(shapes[name]) != shape:
            raise UserError(f"{path}: tensor {name} has shape {tuple(shapes[name])}, config.json says {shape}")
    extra = sorted(n for n in shapes if n not in expected and n.startswith("model.") and n.endswith((".weight", ".bias")))
    if extra:
        raise UserError(f"{path}: checkpoint has tensor {extra[0]}, which config.json's {config.model_type} does not use")


def synthetic_tensor(name: str, shape: tuple[int, ...], config: ModelConfig, seed: int):
    """One deterministic tensor (torch, f32): its values depend only on the seed and its name.

    Norm weights scatter around 1 and biases are non-zero, so a missing bias or norm shows in the logits;
    linear weights are scaled by fan-in, twice the unit scale, so the blocks (not the token's own tied
    embedding) decide the next token and greedy decoding does not collapse into repeats; the embedding is
    scaled so the tied head's logits spread over several units."""
    import torch

    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    if name.endswith("norm.weight"):
        return 1.0 + 0.2 * x
    if name.endswith(".bias"):
        return 0.1 * x
    if name == "model.embed_tokens.weight" or name == "lm_head.weight":
        return x * (3.0 / config.hidden_size**0.5)
    return 2.0 * x / shape[-1] ** 0.5


def synthetic_checkpoint(model_id: str, config: ModelConfig, dtype: str, seed: int = 0, cache: Path | None = None) -> Path:
    """The directory of a synthetic checkpoint (weights, config, tokenizer), written once (atomically) and reused
    by every stack."""
    import torch
    from safetensors.torch import save_file

    from linnet_core import tokenizer

    # the key covers config.json (architecture included), the weights' recipe and the tokenizer, so a stale cache
    # (or one with another tokenizer) is never read
    described = json.dumps(config.to_hf(dtype), sort_keys=True) + tokenizer.fingerprint()
    key = hashlib.sha256(f"{SYNTHETIC_RECIPE}:{described}".encode()).hexdigest()[:10]
    target = (cache or cache_dir()) / "synthetic" / f"{model_id}-{config.model_type}-seed{seed}-{key}"
    if (target / WEIGHTS_FILE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        torch_dtype = getattr(torch, dtype)
        tensors = {
            name: synthetic_tensor(name, shape, config, seed).to(torch_dtype)
            for name, shape in tensor_shapes(config).items()
        }
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt", "linnet_synthetic_seed": str(seed)})
        (tmp / CONFIG_FILE).write_text(json.dumps(config.to_hf(dtype), indent=2))
        generation = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id, "do_sample": False}
        (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2))
        tokenizer.write_tokenizer(config, tmp)
        os.rename(tmp, target)
    except OSError:
        if not (target / WEIGHTS_FILE).exists():  # another process did not win the race: a real failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "linnet"
