# The decode step's compiled code and compile time on an empty inductor cache, with the fusion attempts of argv[3]:
# python decode_code.py MODULE_DIR CODE_OUT ATTEMPTS (modules from gen.py beside this file)
import sys, re, importlib.util, torch
from unittest import mock
from torch._inductor.graph import GraphLowering
torch.set_grad_enabled(False)
spec = importlib.util.spec_from_file_location("linnet_torch_model", sys.argv[1] + "/linnet_torch_model.py")
m = importlib.util.module_from_spec(spec); sys.modules["linnet_torch_model"] = m; spec.loader.exec_module(m)
if len(sys.argv) > 3:
    base = m.cpu_decode_options
    m.cpu_decode_options = lambda: {**base(), "max_fusion_buffer_group_pairwise_attempts": int(sys.argv[3])}
import time
e = m.Engine(rows=1, max_positions=512, mode="inductor")
e.prefill(0, list(range(5, 133)))
codes = []
t0 = time.perf_counter()
with mock.patch.object(GraphLowering, "save_output_code", codes.append):
    e.generate(2)
print(f"decode compile {time.perf_counter() - t0:.1f} s")
c = codes[-1]
open(sys.argv[2], "w").write(c)
calls = re.findall(r"\b(cpp_fused_\w+)\(", c)
print(len(c), "kernel call sites", len(calls), "distinct", len(set(calls)), "allocs", c.count("aoti_torch_empty_strided"))
