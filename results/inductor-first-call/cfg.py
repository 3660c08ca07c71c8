# Cold compile and speed of the generated module's CPU inductor paths, per configuration:
#   A: as main (whole prefill compile, mark_dynamic length; whole decode step with cpp_wrapper)
#   B: prefill by blocks (compile_blocks), whole decode step with cpp_wrapper
#   C: prefill by blocks, whole decode step without cpp_wrapper
import statistics, sys, time, importlib.util, torch
torch.set_grad_enabled(False)
spec = importlib.util.spec_from_file_location("linnet_torch_model", sys.argv[1] + "/linnet_torch_model.py")
m = importlib.util.module_from_spec(spec); sys.modules["linnet_torch_model"] = m; spec.loader.exec_module(m)
how = sys.argv[2]
e = m.Engine(rows=1, max_positions=512, mode="inductor" if how == "A" else "eager")
if how in "BCDE":
    if how == "E":
        for block in e.model.blocks:
            block.compile(fullgraph=True, options={"cpp_wrapper": True, "cpp_wrapper_build_separate": True})
    else:
        m.compile_blocks(e.model)
    opts = {**m.cpu_decode_options(), "cpp_wrapper_build_separate": True} if how in "DE" else m.cpu_decode_options() if how == "B" else {k: v for k, v in m.cpu_decode_options().items() if k != "cpp_wrapper"}
    compiled = torch.compile(e.decode_step, dynamic=False, fullgraph=True, options=opts)
    e.decode = lambda window: compiled(512)
p1, p2 = list(range(5, 133)), list(range(7, 107))
t0 = time.perf_counter(); e.prefill(0, p1); t1 = time.perf_counter(); e.generate(4); t2 = time.perf_counter()
e.reset(); e.prefill(0, p2); t3 = time.perf_counter()
ttft, rates = [], []
for i in range(5):
    e.reset(); t = time.perf_counter(); e.prefill(0, p1); ttft.append(time.perf_counter() - t)
    t = time.perf_counter(); out = e.generate(32); rates.append(32 / (time.perf_counter() - t))
print(f"{how}: cold prefill {t1-t0:.1f} s, decode {t2-t1:.1f} s, second length {t3-t2:.1f} s, total {t3-t0:.1f} s; "
      f"prefill 128 {min(ttft)*1e3:.1f} ms, decode {statistics.median(rates):.1f} tok/s (of {[round(r,1) for r in rates]}); tokens {out[:4,0].tolist()}")
