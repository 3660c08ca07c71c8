import sys
from pathlib import Path
from linnet_core.models import resolve
from linnet_core.checkpoint import read_config
from linnet_core.arch import build_decoder
from linnet_core.emit_torch import write
from linnet_core.targets import CompileOptions
model, out = sys.argv[1], Path(sys.argv[2])
entry, ckpt = resolve(model)
dec = build_decoder(read_config(ckpt))
print(write(dec, ckpt, out, CompileOptions(dtype="f32", max_positions=512, batch=1)))
