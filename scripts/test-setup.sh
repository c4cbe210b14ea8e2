#!/usr/bin/env bash
# Installs the test-only oracles no one here wrote: the @huggingface/tokenizers JavaScript port
# (npm) into tests/tools/node_modules. python3-jinja2 comes from scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/../tests/tools"
if [ ! -d node_modules/@huggingface/tokenizers ]; then
  npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error
fi
