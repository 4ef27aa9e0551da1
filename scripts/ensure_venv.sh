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
    echo "[setup] installing the project and its dependencies into $BENCH_VENV (first run: about 30 s to 1.5 min with torch's wheel on local disk)" >&2
    # uv first where no torch lies outside the venv (uv would not see it: scripts/uv_install.py), pip where uv fails
    # or BENCH_NO_UV=1; what each installs is pip's configuration's
    _done=""
    if [ -z "${BENCH_NO_UV:-}" ] && ! "$BENCH_VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)" 2>/dev/null; then
        echo "[setup] through uv (BENCH_NO_UV=1: through pip)" >&2
        if "$BENCH_VENV/bin/python" -m pip install --quiet --disable-pip-version-check uv >/dev/null 2>&1 \
            && "$BENCH_VENV/bin/python" "$_root/scripts/uv_install.py" "$BENCH_VENV/bin/python" -e "$_root[test]"; then
            _done=1
        else
            echo "[setup] uv could not install it; pip instead" >&2
        fi
    fi
    [ -n "$_done" ] || "$BENCH_VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$_root[test]" \
        || { echo "[setup] pip install failed" >&2; exit 1; }
    echo "$_want" > "$_stamp"
fi
BENCH_PY="$BENCH_VENV/bin/python"
export PATH="$BENCH_VENV/bin:$PATH"
