# Sourced by run_bench.sh and run_tests.sh: create the project's virtual environment on first use
# and (re)install the project whenever pyproject.toml changes. The venv sees system site-packages,
# so a machine that already has a CUDA build of torch keeps it instead of downloading another.
# Override the location with BENCH_VENV, the interpreter with PYTHON.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_VENV="${BENCH_VENV:-$_root/.venv}"
_py="${PYTHON:-python3}"
if [ ! -x "$BENCH_VENV/bin/python" ]; then
    echo "[setup] creating virtual environment $BENCH_VENV (system site-packages visible)" >&2
    "$_py" -m venv --system-site-packages "$BENCH_VENV" || { echo "[setup] could not create $BENCH_VENV" >&2; exit 1; }
fi
_stamp="$BENCH_VENV/.bench-installed"
_want="$(cat "$_root/pyproject.toml" | cksum)"
if [ ! -f "$_stamp" ] || [ "$(cat "$_stamp")" != "$_want" ]; then
    echo "[setup] installing the project and its dependencies into $BENCH_VENV (first run: about 45 s to 1.5 min with torch's wheel on local disk)" >&2
    "$BENCH_VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$_root[test]" \
        || { echo "[setup] pip install failed" >&2; exit 1; }
    echo "$_want" > "$_stamp"
fi
BENCH_PY="$BENCH_VENV/bin/python"
export PATH="$BENCH_VENV/bin:$PATH"
