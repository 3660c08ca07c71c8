"""Hugging Face checkpoints: the tensor names and shapes a model description needs, reading a local directory,
and writing deterministic synthetic weights of the exact shape as a checkpoint every stack can read."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from linnet_core.config import ModelConfig
from linnet_core.errors import UserError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SYNTHETIC_RECIPE = 4  # bump when synthetic_tensor, train_on_corpus or the files a synthetic checkpoint holds change
# Test-size twins (up to this many parameters) are trained briefly on the shipped text (train_on_corpus), in
# seconds on a CPU; the full-size shapes keep random weights.
TRAINED_MAX_PARAMETERS = 5_000_000
TRAIN_STEPS, TRAIN_SEQUENCE, TRAIN_BATCH, TRAIN_LR = 300, 64, 16, 3e-3
INITIALIZER_RANGE = 0.02  # a trained twin's starting linear and embedding weights: transformers' initializer_range
# Seeds flow into numpy's and torch's generators (synthetic_tensor multiplies them by 1_000_003 and torch takes 64
# bits): a 32-bit unsigned seed fits every use, and a seed outside that range is refused before anything is written.
MAX_SEED = 2**32 - 1


def resolved(path: Path, flag: str) -> Path:
    """The absolute path without symlinks; a one-line error for a symlink loop (a RuntimeError before Python 3.13,
    an OSError since) or a path that cannot be followed."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as e:
        raise UserError(f"{flag} {path}: cannot be followed ({getattr(e, 'strerror', None) or e})") from None


def check_seed(seed: int) -> None:
    """A one-line error for a --seed the generators cannot take."""
    if not 0 <= seed <= MAX_SEED:
        shown = str(seed) if len(str(seed)) <= 40 else "a huge integer"
        raise UserError(f"--seed {shown}: give a whole number from 0 to {MAX_SEED}")


def tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the Hugging Face layout by name, from the model description (fused tensors whole); a tied
    head is not stored."""
    from linnet_core.arch import build_decoder

    return build_decoder(config).checkpoint_shapes()


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


def tensor_index(path: Path) -> dict[str, tuple[Path, tuple[int, ...]]]:
    """Each tensor's file and shape, from the safetensors headers, without reading the tensors."""
    from safetensors import SafetensorError, safe_open

    index = {}
    for file in weight_files(path):
        try:
            with safe_open(file, framework="np") as f:
                index |= {name: (file, tuple(f.get_slice(name).get_shape())) for name in f.keys()}
        except (SafetensorError, OSError, ValueError) as e:
            raise UserError(f"{file}: unreadable safetensors file ({e})") from None
    return index


def header_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes from the safetensors headers, without reading the tensors."""
    return {name: shape for name, (_, shape) in tensor_index(path).items()}


def load_weights(path: Path, framework: str = "np") -> dict:
    """All tensors of a checkpoint directory, read at once, checked against the config's names and shapes.

    framework is safetensors' ("np" or "pt"); bf16 tensors need "pt"."""
    return dict(LazyWeights(path, framework))


@contextmanager
def numpy_on_small_pages() -> Iterator[None]:
    """numpy's new arrays on 4 KiB pages for the length of a conversion (the ONNX emit, the GGUF export), where numpy
    otherwise asks Linux to back every array of 4 MiB or more with 2 MiB pages (MADV_HUGEPAGE). A conversion reads
    each array once, so huge pages buy it nothing; and where a VM hands its free 2 MiB blocks back to its host
    (virtio-balloon free page reporting), a fresh huge page is slow to touch: DESIGN.md gives what it cost the
    exports on this project's VM (results/huge-pages/)."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage  # numpy 2
    except ImportError:  # numpy 1.26
        from numpy.core.multiarray import _set_madvise_hugepage

    before = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(before)


class LazyWeights(Mapping):
    """A checkpoint directory's tensors by name, checked against the config's names and shapes from the files'
    headers, each read from its file only when asked for: an emitter that writes each tensor out as it goes (ONNX's
    external data) then never holds the whole model. framework is safetensors' ("np" or "pt")."""

    def __init__(self, path: Path, framework: str = "np"):
        index = tensor_index(path)
        check_weights(path, read_config(path), {name: shape for name, (_, shape) in index.items()})
        self.framework, self.files = framework, {name: file for name, (file, _) in index.items()}

    def __getitem__(self, name: str):
        from safetensors import SafetensorError, safe_open

        file = self.files[name]
        try:
            with safe_open(file, framework=self.framework) as f:
                return f.get_tensor(name)
        except (SafetensorError, OSError, ValueError) as e:
            raise UserError(f"{file}: tensor {name} is unreadable ({e})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)


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


@dataclass(frozen=True)
class Rescaling:
    """What an architecture does to stored weights on their way in, read from its model description: it may multiply
    the embedding (Gemma 3: by sqrt(hidden)) and its norms may scale by an offset plus the weight (Gemma 3's 1 + w)."""

    embed_multiplier: float = 1.0
    norm_offsets: dict[str, float] = field(default_factory=dict)  # Hugging Face name -> offset, where there is one
    final_norm: str = "model.norm.weight"

    @classmethod
    def of(cls, config: ModelConfig) -> Rescaling:
        from linnet_core.arch import build_decoder

        decoder = build_decoder(config)
        multiplier = next((op.attrs.get("scale", 1.0) for op in decoder.prologue if op.kind == "embed"), 1.0)
        named = {w.name: w.hf_name for w in decoder.global_weights}
        final = next(named[op.weights[0]] for op in decoder.epilogue if op.kind == "rms_norm")
        offsets = {named[w]: op.attrs["offset"] for op in decoder.epilogue if "offset" in op.attrs for w in op.weights}
        for layer in range(config.num_hidden_layers):
            named = decoder.weights_of_layer(layer)
            offsets |= {named[w].hf_name: op.attrs["offset"] for op in decoder.block_of(layer) if "offset" in op.attrs
                        for w in op.weights}  # fmt: skip
        return cls(multiplier, offsets, final)


def synthetic_tensor(name: str, shape: tuple[int, ...], config: ModelConfig, seed: int, trained: bool = False,
                     rescaling: Rescaling = Rescaling()):  # fmt: skip
    """One deterministic tensor (torch, f32): its values depend only on the seed and its name.

    Norms scale by about 1 and biases are non-zero, so a missing bias or norm shows in the logits.
    Untrained (a full-size shape): linear weights at the unit scale of their fan-in; what enters the first block has
    entries of about 3/sqrt(hidden), so the blocks (not the token's own embedding) decide the next token, and the
    head's logits spread over several units. Twice the unit scale (recipes up to 3) made a deep shape chaotic:
    rounding grew layer by layer, so that bf16 put the 0.5B shape's logits 5.0 from a float64 truth (top-1 agreement
    0.47) and right rows could not be told from wrong ones; at the unit scale it is 0.37 (0.93), as a real checkpoint
    rounds. Where the architecture multiplies the embedding (`rescaling`: Gemma 3), the embedding is divided by it
    and the final norm scales by it instead, or the token's own embedding decides and the tied head predicts the
    input token (94% of positions on the Gemma 3 270M shape until recipe 4); where its norms add an offset to their
    weight, the weight is drawn around 1 less (results/synthetic-recipe/). Trained (a test-size twin, see
    train_on_corpus): the starting point transformers' own initialisation would give (initializer_range 0.02), so
    what training learns, not the random start, shapes the output; its norms keep weights around 1 (`rescaling` left
    at its default), as they were when the twins' figures were measured."""
    import torch

    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    multiplier = rescaling.embed_multiplier
    if name.endswith("norm.weight"):
        scale = multiplier if name == rescaling.final_norm else 1.0
        return scale * (1.0 + 0.2 * x) - rescaling.norm_offsets.get(name, 0.0)
    if name.endswith(".bias"):
        return 0.1 * x
    if trained:
        return INITIALIZER_RANGE * x
    if name == "model.embed_tokens.weight" or name == "lm_head.weight":
        return x * (3.0 / config.hidden_size**0.5 / multiplier)
    return x / shape[-1] ** 0.5


def train_on_corpus(tensors: dict, config: ModelConfig, directory: Path, seed: int) -> dict:
    """The tensors after a short training run of transformers' model of this architecture on the text the
    tokenizer was trained on (linnet_core/data/): next-token prediction, AdamW, fixed seed, one thread (so the
    same machine always writes the same weights).

    Why: on qwen2-tiny's random weights, rounding the weights to 8 bits changed the top-1 token at 7% of the
    probe's positions and rounding them to bf16 at 4%, and the mean KL divergence of int8 was 1.7e-2: figures that
    describe random weights' many near-ties, not the quantization. Trained, the twin's figures are a language
    model's (int8: top-1 agreement 0.97-1.0 per probe, mean KL about 1e-3; bf16 weights: 0.99)."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM

    from linnet_core import tokenizer

    ids = torch.tensor(Tokenizer.from_file(str(directory / "tokenizer.json")).encode(tokenizer.CORPUS.read_text()).ids)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:  # callers may hold gradients off (a runner loading under inference_mode): training needs them
        with torch.inference_mode(False), torch.enable_grad(), torch.random.fork_rng():
            torch.manual_seed(seed)
            hf_config = AutoConfig.from_pretrained(directory)  # trained in f32 whatever dtype the checkpoint keeps
            model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32, attn_implementation="eager")
            model.load_state_dict(tensors, strict=False)  # a tied head is not among the tensors
            model.train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=TRAIN_LR, weight_decay=0.0)
            for _ in range(TRAIN_STEPS):
                starts = torch.randint(0, len(ids) - TRAIN_SEQUENCE, (TRAIN_BATCH,)).tolist()
                batch = torch.stack([ids[s : s + TRAIN_SEQUENCE] for s in starts])
                loss = model(batch, labels=batch).loss
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    trained = model.state_dict()
    return {name: trained[name].detach().clone() for name in tensors}


# The untrained recipe in words (full-size shapes)
RANDOM_RECIPE = ("seeded Gaussians: linear weights scaled by 1/sqrt(fan-in), norms scaling by about 1, biases "
                 "non-zero, the embedding scaled so that what enters the first block has entries of about "
                 "3/sqrt(hidden) and logits spread over several units")
# The untrained recipe up to recipe 3, when every model had it and result files did not record theirs: a file without
# its recipe was made so
UNRECORDED_RECIPE = ("seeded Gaussians: linear weights scaled by twice 1/sqrt(fan-in), norm weights around 1, biases "
                     "non-zero, the embedding scaled so that logits spread over several units")


def is_trained(config: ModelConfig) -> bool:
    """Whether synthetic_checkpoint trains this model's weights (a test-size twin) or leaves them random."""
    return config.num_parameters <= TRAINED_MAX_PARAMETERS


def synthetic_recipe(config: ModelConfig) -> str:
    """How synthetic_checkpoint makes this model's weights, in words for a result file and its page."""
    if is_trained(config):
        return (f"seeded Gaussians (linear and embedding weights at {INITIALIZER_RANGE}, as transformers initialises "
                f"them; norm weights around 1; biases non-zero), then {TRAIN_STEPS} steps of next-token training on "
                "this project's own text, so that the output distributions are a small language model's")
    return f"{RANDOM_RECIPE} (too large to train here)"


def synthetic_checkpoint(model_id: str, config: ModelConfig, dtype: str, seed: int = 0, cache: Path | None = None) -> Path:
    """The directory of a synthetic checkpoint (weights, config, tokenizer), written once (atomically) and reused
    by every stack."""
    check_seed(seed)
    from linnet_core import tokenizer

    # the key covers config.json (architecture included), the weights' recipe and the tokenizer, so a stale cache
    # (or one with another tokenizer) is never read
    described = json.dumps(config.to_hf(dtype), sort_keys=True) + tokenizer.fingerprint()
    key = hashlib.sha256(f"{SYNTHETIC_RECIPE}:{described}".encode()).hexdigest()[:10]
    target = (cache or cache_dir()) / "synthetic" / f"{model_id}-{config.model_type}-seed{seed}-{key}"
    if (target / WEIGHTS_FILE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # a second process asking for the same checkpoint (two trials of a row on one Ray node, two runs at once) waits
    # for the first's instead of making the same weights again
    with FileLock(target.parent / f".{target.name}.lock"):
        if not (target / WEIGHTS_FILE).exists():
            write_synthetic_checkpoint(target, config, dtype, seed)
    return target


def write_synthetic_checkpoint(target: Path, config: ModelConfig, dtype: str, seed: int) -> None:
    """Weights, config and tokenizer written to a scratch directory beside target, then renamed into place."""
    import torch
    from safetensors.torch import save_file

    from linnet_core import tokenizer

    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        (tmp / CONFIG_FILE).write_text(json.dumps(config.to_hf(dtype), indent=2))
        generation = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id, "do_sample": False}
        (tmp / "generation_config.json").write_text(json.dumps(generation, indent=2))
        tokenizer.write_tokenizer(config, tmp)
        trained = is_trained(config)
        rescaling = Rescaling() if trained else Rescaling.of(config)
        tensors = {name: synthetic_tensor(name, shape, config, seed, trained, rescaling)
                   for name, shape in tensor_shapes(config).items()}  # fmt: skip
        if trained:
            tensors = train_on_corpus(tensors, config, tmp, seed)
        torch_dtype = getattr(torch, dtype)
        tensors = {name: t.to(torch_dtype).contiguous() for name, t in tensors.items()}
        metadata = {"format": "pt", "linnet_synthetic_seed": str(seed), "linnet_trained_steps": str(TRAIN_STEPS if trained else 0)}
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata=metadata)
        os.rename(tmp, target)
    except OSError:
        if not (target / WEIGHTS_FILE).exists():  # another process did not win the race: a real failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "linnet"
