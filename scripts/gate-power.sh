#!/usr/bin/env bash
# How good is the gate? Runs .ci/gate REPEATS times on unchanged code (baseline and candidate both HEAD) and REPEATS
# times on HEAD with a planted 15% slowdown of linnet-torch's decode (every decode call sleeps 17.6% of its own time,
# so decode tok/s is 1/1.176 = 0.85 of the truth), and writes what happened to results/gate-power/<time>.txt
# (JSON text; not .json, which `site` and `check` would read as a bench result file).
#   scripts/gate-power.sh TRIALS RUNNER...       (`make gate-power`; GATE_POWER_REPEATS, default 20)
# Targets (issue 13): the planted slowdown caught in at least 19 of 20 gates, unchanged code passing 19 of 20.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
repeats=${GATE_POWER_REPEATS:-20}
py=${PY:-$root/.venv/bin/python}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/same" >/dev/null 2>&1 || true; git worktree remove --force "$tmp/slow" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach --quiet "$tmp/same" HEAD
git worktree add --detach --quiet "$tmp/slow" HEAD
cat >>"$tmp/slow/runners/linnet_torch.py" <<'PLANT'


import time as _time

_Measured = Runner


class Runner(_Measured):  # planted by scripts/gate-power.sh: decode 15% slower
    def decode(self, n):
        start = _time.perf_counter()
        out = super().decode(n)
        _time.sleep((_time.perf_counter() - start) * (1 / 0.85 - 1))
        return out
PLANT
out=results/gate-power/$(date -u +%Y%m%dT%H%M%SZ).txt
mkdir -p "$(dirname "$out")" "$tmp/runs"
for i in $(seq "$repeats"); do
    for kind in same slow; do
        start=$SECONDS
        status=0
        GATE_BASE=HEAD GATE_CANDIDATE="$tmp/$kind" GATE_OUT="$tmp/runs/$kind-$i" PY="$py" .ci/gate "$@" >"$tmp/runs/$kind-$i.log" 2>&1 || status=$?
        echo "$kind $i exit=$status $((SECONDS - start))" >>"$tmp/runs/index"
        echo "gate-power: $kind $i: exit $status in $((SECONDS - start)) s: $(tail -n 1 "$tmp/runs/$kind-$i.log")"
    done
    "$py" - "$tmp/runs" "$out" "$repeats" "$*" <<'TALLY'
import datetime, json, os, pathlib, subprocess, sys
runs_dir, out, repeats, args = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()
gates = []
for line in (runs_dir / "index").read_text().splitlines():
    kind, i, status, seconds = line.split()
    report_path = runs_dir / f"{kind}-{i}" / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    found = [(f["runner"], f["subject"]) for c in (report or {}).get("comparisons", []) for r in c["rows"]
             for f in r["findings"] if f["kind"] == "regression"]
    torch = [r for c in (report or {}).get("comparisons", []) for r in c["rows"] if r["runner"] == "linnet-torch"]
    gates.append({
        "kind": "unchanged" if kind == "same" else "planted 15% slower linnet-torch decode",
        "exit": int(status.split("=")[1]), "seconds": int(seconds),
        "regressions": [f"{a} {b}" for a, b in found],
        "linnet_torch_decode": {"change": torch[0]["changes"].get("decode_tok_s"), "interval": torch[0]["intervals"].get("decode_tok_s")} if torch else None,
        "last_line": (runs_dir / f"{kind}-{i}.log").read_text().strip().splitlines()[-1:],
    })
same = [g for g in gates if g["kind"] == "unchanged"]
slow = [g for g in gates if g["kind"] != "unchanged"]
summary = {
    "unchanged_passed": f"{sum(g['exit'] == 0 for g in same)} of {len(same)}",
    "planted_caught": f"{sum('linnet-torch decode_tok_s' in g['regressions'] for g in slow)} of {len(slow)}",
    "planted_failed_for_other_rows": sum(any(r != 'linnet-torch decode_tok_s' for r in g['regressions']) for g in slow),
    "gate_minutes_max": round(max(g["seconds"] for g in gates) / 60, 1),
}
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
out.write_text(json.dumps({
    "what": "scripts/gate-power.sh: .ci/gate on unchanged code and on a planted 15% decode slowdown of linnet-torch",
    "commit": commit, "trials_per_gate": int(args[0]), "runners": args[1:], "repeats_planned": repeats,
    "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "load_average_1_5_15_min": [round(x, 1) for x in os.getloadavg()],  # other work on the machine skews every gate
    "summary": summary, "gates": gates,
}, indent=2) + "\n")
print("gate-power:", json.dumps(summary))
TALLY
done
echo "gate-power: wrote $out"
