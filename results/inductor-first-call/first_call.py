# Cold first call and speed of a generated module's CPU inductor path (Engine mode "inductor"), on an empty inductor
# cache: python first_call.py MODULE_DIR LABEL. Prints the cold prefill (128 tokens) and decode compile+run times,
# then the warm prefill (min of 5) and decode rate (median of 5 x 32 steps).
import statistics, sys, time, importlib.util, torch
torch.set_grad_enabled(False)
spec = importlib.util.spec_from_file_location("linnet_torch_model", sys.argv[1] + "/linnet_torch_model.py")
m = importlib.util.module_from_spec(spec); sys.modules["linnet_torch_model"] = m; spec.loader.exec_module(m)
e = m.Engine(rows=1, max_positions=512, mode="inductor")
prompt = list(range(5, 133))
t0 = time.perf_counter(); e.prefill(0, prompt); t1 = time.perf_counter(); e.generate(4); t2 = time.perf_counter()
ttft, rates = [], []
for i in range(5):
    e.reset(); t = time.perf_counter(); e.prefill(0, prompt); ttft.append(time.perf_counter() - t)
    t = time.perf_counter(); out = e.generate(32); rates.append(32 / (time.perf_counter() - t))
print(f"{sys.argv[2]}: cold prefill {t1-t0:.1f} s, decode {t2-t1:.1f} s, first call {t2-t0:.1f} s; warm prefill "
      f"{min(ttft)*1e3:.1f} ms, decode {statistics.median(rates):.1f} tok/s; tokens {out[:4,0].tolist()}")
