#!/usr/bin/env bash
# The checks of `tandem k8s render` that run here (issue 9), over every example graph deploy/*.yaml,
# each rendered with --namespace tandem --image tandem:test:
#   render_checks.sh golden   TANDEM   the output equals tests/golden/k8s/<graph>.yaml (diff -u)
#   render_checks.sh validate TANDEM   every document validates against the Kubernetes API schemas
#                                      (tests/k8s/validate_manifests.mjs, npm kubernetes-models)
#   render_checks.sh update   TANDEM   rewrites the golden files (then review `git diff`)
# Registered in ctest as k8s_render_golden and k8s_render_validate (tests/CMakeLists.txt).
set -euo pipefail
mode=${1:?usage: render_checks.sh golden|validate|update TANDEM_BINARY}
tandem=${2:?usage: render_checks.sh golden|validate|update TANDEM_BINARY}
repo=$(cd "$(dirname "$0")/../.." && pwd)
golden="$repo/tests/golden/k8s"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

graphs=("$repo"/deploy/*.yaml)
for g in "${graphs[@]}"; do
  "$tandem" k8s render "$g" --namespace tandem --image tandem:test -o "$work/$(basename "$g")"
done

case "$mode" in
  update)
    mkdir -p "$golden"
    rm -f "$golden"/*.yaml
    cp "$work"/*.yaml "$golden"/
    echo "wrote ${#graphs[@]} golden files to $golden"
    ;;
  golden)
    status=0
    for g in "${graphs[@]}"; do
      name=$(basename "$g")
      if [ ! -f "$golden/$name" ]; then
        echo "no golden file tests/golden/k8s/$name (run: $0 update $tandem)"; status=1; continue
      fi
      diff -u "$golden/$name" "$work/$name" || status=1
    done
    for f in "$golden"/*.yaml; do
      [ -f "$repo/deploy/$(basename "$f")" ] || { echo "stale golden file $f (no deploy graph)"; status=1; }
    done
    [ $status = 0 ] && echo "${#graphs[@]} graphs render as their golden files" ||
      echo "differences: if intended, run: $0 update $tandem  and review git diff"
    exit $status
    ;;
  validate)
    node "$repo/tests/k8s/validate_manifests.mjs" "$work"/*.yaml
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
