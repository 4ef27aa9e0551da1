#!/usr/bin/env bash
# Re-render every committed GPU example's reports from its committed store, in place, after a change to the
# report (each example's README says the same command for one folder). Which store and sweep a folder shows is
# read from the first line of its report.md; a folder whose store is not committed (the superseded
# h100-2026-11-24) is left as it is and named. The example's host-noise.json is the host figure its reports are
# rendered with (BENCH_HOST_NOISE), as its README says; an example without one gets none, never this machine's.
# Runs on bash 3.2 too (no empty arrays under set -u).
# Usage: scripts/rerender_examples.sh [examples/<name> ...]   (default: every example)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_venv.sh
dirs=("$@"); [ ${#dirs[@]} -gt 0 ] || dirs=(examples/*/)
status=0
for ex in "${dirs[@]}"; do
    ex="${ex%/}"
    for md in "$ex"/*/report.md; do
        [ -f "$md" ] || continue
        head="$(head -1 "$md")"
        sweep="$(sed -n 's/.*report of sweep \([0-9,]*\) of .*/\1/p' <<<"$head")"
        store="$ex/$(basename "$(sed -n 's/.* of \(.*\) -->.*/\1/p' <<<"$head")")"
        out="$(dirname "$md")"
        if [ -z "$sweep" ]; then
            echo "[rerender] $out: its first line names no sweep and store ($head); left as it is" >&2
            continue
        fi
        if [ ! -f "$store" ]; then
            echo "[rerender] $out: its store ($store) is not committed; left as it is" >&2
            continue
        fi
        echo "[rerender] $out <- $store sweep $sweep" >&2
        # the example's own host figure; where it has none, none (never this machine's selfcheck figure)
        BENCH_HOST_NOISE="$ex/host-noise.json" "$BENCH_PY" -m bench report --store "$store" --sweep "$sweep" \
            --report-dir "$out" --plots-dir "$out/plots" >/dev/null || { echo "[rerender] $out FAILED" >&2; status=1; }
    done
done
exit $status
