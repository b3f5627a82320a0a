#!/bin/sh
# On a machine with a GPU, from the repository root (cglint and torch installed):
#   sh tests/data/replay_divergence/run_gpu.sh [OUTDIR]
# For each program: its own verdicts (replay against eager, per case), the lines it marks, and
# what `cglint verify` reports on a real capture. Programs run side by side.
dir=$(dirname "$0")
out=${1:-/tmp/replay_divergence}
mkdir -p "$out"
for f in "$dir"/*.py; do
  name=$(basename "$f" .py)
  (
    python "$f" > "$out/$name.run" 2>&1
    python -m cglint verify --format json "$f" > "$out/$name.json" 2> "$out/$name.err"
  ) &
done
wait
for f in "$dir"/*.py; do
  name=$(basename "$f" .py)
  echo "== $name"
  grep -E "CASE|VERDICT|Error" "$out/$name.run"
  grep -n "# expect:" "$f" | sed 's/^\([0-9]*\):.*# expect: \(CG[0-9]*\).*/  marked \2 line \1/'
  python -c "
import json, sys
d = json.load(open(sys.argv[1]))
print('  mode', d['mode'], 'run', d['run'])
for x in d['findings']:
    print('  found', x['code'], 'line', x['line'], '|', x['message'][:110], [r['line'] for r in x.get('related', ())])
" "$out/$name.json" || tail -5 "$out/$name.err"
done
