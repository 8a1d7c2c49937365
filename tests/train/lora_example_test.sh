#!/usr/bin/env bash
# The LoRA example (examples/lora) end to end, small: 64 quiz pairs, 2 workers, 2 epochs.
# Checks its outcome, not its speed: exit 0; the adapter checkpoint holds the PEFT files;
# the training-set loss after training is below the base model's; the served model
# answered; a rerun with the same name and one more epoch resumes at epoch 3 from the
# checkpoint (it trains only that epoch); a missing quiz file fails with a clear message.
# Usage: lora_example_test.sh PATH_TO_LORA_QUIZ_BINARY
set -u
bin="$1"
quiz=/usr/share/games/bsdgames/quiz
if [ ! -f "$quiz/europe" ]; then
  echo "FAIL: $quiz/europe is missing: the example reads the quiz files of Debian's" \
    "bsdgames package (apt-get install bsdgames, or scripts/install-deps.sh)"
  exit 1
fi
# A deadline per run (150 s times the test time scale): a hang fails here, not at ctest's kill.
limit_s=$(awk -v s="${RAIO_TEST_TIME_SCALE:-${RAIO_BUILD_TIME_SCALE:-1}}" \
  'BEGIN { s += 0; if (s < 1) s = 1; printf "%d", 150 * s }')
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

# run NAME ARGS...: runs the example; its stdout in $dir/NAME.out (the summary is its last
# JSON line), stderr in $dir/NAME.err, its exit status in rc.
run() {
  local name="$1"
  shift
  rc=0
  timeout -k 10 "$limit_s" "$bin" "$@" >"$dir/$name.out" 2>"$dir/$name.err" || rc=$?
  echo "---- $name: exit $rc"
  cat "$dir/$name.out" "$dir/$name.err"
}

common=(--max-pairs 64 --storage "$dir/storage" --name lora_test --show 2 --report-every 2)
run first --epochs 2 "${common[@]}"
if [ "$rc" -ne 0 ]; then fail "first run: exit $rc"; fi
# The checks on the summary (the last line, JSON).
python3 - "$dir/first.out" 2 <<'EOF' || fail "first run: summary checks"
import json, math, os, sys
out, epochs = sys.argv[1], int(sys.argv[2])
# The last JSON line: workers that share the terminal may log after it.
s = json.loads([l for l in open(out).read().splitlines() if l.startswith("{")][-1])
bad = []
for k in ("train_loss_before", "train_loss_after", "held_out_loss_before", "held_out_loss_after"):
    if not math.isfinite(s[k]) or s[k] <= 0: bad.append(f"{k} = {s[k]}")
if not s["train_loss_after"] < s["train_loss_before"]:
    bad.append(f"training loss did not fall: {s['train_loss_before']} -> {s['train_loss_after']}")
for f in ("adapter_config.json", "adapter_model.safetensors", "optimizer.pt", ".metadata.json"):
    if not os.path.isfile(os.path.join(s["adapter_dir"], f)): bad.append(f"no {f} in {s['adapter_dir']}")
cfg = json.load(open(os.path.join(s["adapter_dir"], "adapter_config.json")))
if cfg.get("peft_type") != "LORA" or cfg.get("r") != 8: bad.append(f"adapter_config.json: {cfg}")
if os.path.basename(s["adapter_dir"]) != f"checkpoint_{epochs - 1:06d}":
    bad.append(f"adapter_dir {s['adapter_dir']}: expected checkpoint_{epochs - 1:06d}")
if s["train_pairs"] + s["held_out_pairs"] != 64: bad.append(f"pairs: {s}")
print("summary:", s)
for b in bad: print("  bad:", b)
sys.exit(1 if bad else 0)
EOF
grep -q "served by the engine in a raio actor" "$dir/first.out" || fail "first run: nothing served"
grep -q "trainable params: " "$dir/first.out" || fail "first run: no parameter counts"

# Resume: same name, 3 epochs: only epoch 3 is trained, from checkpoint_000001.
run resumed --epochs 3 "${common[@]}"
if [ "$rc" -ne 0 ]; then fail "resumed run: exit $rc"; fi
python3 - "$dir/first.out" "$dir/resumed.out" <<'EOF' || fail "resumed run: checks"
import json, os, re, sys
first, resumed = [json.loads([l for l in open(p).read().splitlines() if l.startswith("{")][-1])
                  for p in sys.argv[1:3]]
text = open(sys.argv[2]).read()
epochs = sorted(set(int(e) for e in re.findall(r"^\s+epoch\s+(\d+)/3", text, re.M)))
bad = []
if epochs != [3]: bad.append(f"progress lines show epochs {epochs}, expected only 3")
if resumed["steps"] != first["steps"] * 3 / 2: bad.append(f"steps {first['steps']} then {resumed['steps']}")
if os.path.basename(resumed["adapter_dir"]) != "checkpoint_000002":
    bad.append(f"adapter_dir {resumed['adapter_dir']}")
for b in bad: print("  bad:", b)
sys.exit(1 if bad else 0)
EOF

run missing_file "$dir/no_such_quiz_file"
if [ "$rc" -eq 0 ] || ! grep -q "cannot open quiz file $dir/no_such_quiz_file (Debian's bsdgames" \
  "$dir/missing_file.err"; then
  fail "missing file: exit $rc"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
