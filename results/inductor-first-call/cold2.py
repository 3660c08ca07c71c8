# Cold compile of the generated module's inductor paths on a CPU: "whole" is the CPU path (Engine mode inductor);
# "blocks" is the GPU path run on a CPU (compile_blocks, the static-window step, the bucketed prefill).
# python cold2.py MODULE_DIR whole|blocks, with an empty TORCHINDUCTOR_CACHE_DIR.
import sys, time, importlib.util, torch
torch.set_grad_enabled(False)
spec = importlib.util.spec_from_file_location("linnet_torch_model", sys.argv[1] + "/linnet_torch_model.py")
m = importlib.util.module_from_spec(spec); sys.modules["linnet_torch_model"] = m; spec.loader.exec_module(m)
how = sys.argv[2]
e = m.Engine(rows=1, max_positions=512, mode="inductor" if how == "whole" else "eager")
prompt = list(range(5, 133))
t0 = time.perf_counter()
if how == "blocks":
    m.compile_blocks(e.model)
    e.decode = lambda window: e.decode_step(e.max_positions)
    e.prefill_graphs = {}
    e.generate(1); e.reset()  # the GPU engine's capture at load
tok = e.prefill(0, prompt); out = e.generate(4)
t1 = time.perf_counter()
e.reset(); e.prefill(0, prompt); t = time.perf_counter(); out2 = e.generate(32); rate = 32 / (time.perf_counter() - t)
print(f"{how}: compile and first prefill + decode {t1 - t0:.1f} s; then {rate:.1f} tok/s; tokens {tok} {out2[:5, 0].tolist()}")
