#!/usr/bin/env bash
# Installs the test-only oracles no one here wrote: the @huggingface/tokenizers JavaScript port,
# the openai client (and zod, for its zodResponseFormat helper), kubernetes-models (the Kubernetes
# API schemas), yaml, and ajv with ajv-formats (JSON Schema validation of structured outputs) (npm)
# into tests/tools/node_modules.
# python3-jinja2 and python3-jsonschema come from scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/../tests/tools"
# Re-run when any package of package.json is missing (a clone from before a dependency was added).
if [ ! -d node_modules/@huggingface/tokenizers ] || [ ! -d node_modules/openai ] ||
   [ ! -d node_modules/kubernetes-models ] || [ ! -d node_modules/yaml ] ||
   [ ! -d node_modules/ajv ] || [ ! -d node_modules/ajv-formats ] || [ ! -d node_modules/zod ]; then
  npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error
fi
