# Sourced by the scripts that run the project's tools: puts the virtual environment that
# scripts/install made (./.venv) first on PATH, unless one is active already.
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python ]; then
  export PATH="$PWD/.venv/bin:$PATH"
fi
