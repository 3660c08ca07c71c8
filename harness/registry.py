"""The model registry the bench reads: linnet_core.models, where Linnet resolves model names and checkpoint
directories too (this module keeps the harness's import path)."""

from linnet_core.models import DEFAULT_MODEL, MODELS, ModelEntry, checkpoint_for, get_model  # noqa: F401
