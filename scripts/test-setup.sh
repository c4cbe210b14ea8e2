#!/usr/bin/env bash
# Installs the test-only oracles no one here wrote: the @huggingface/tokenizers JavaScript port,
# the openai client, kubernetes-models (the Kubernetes API schemas) and yaml (npm) into
# tests/tools/node_modules. python3-jinja2 comes from scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/../tests/tools"
# Re-run when any package of package.json is missing (a clone from before a dependency was added).
if [ ! -d node_modules/@huggingface/tokenizers ] || [ ! -d node_modules/openai ] ||
   [ ! -d node_modules/kubernetes-models ] || [ ! -d node_modules/yaml ]; then
  npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error
fi
