#!/usr/bin/env bash
# `make check`: the edit loop. Formatting of the whole tree, then clippy and the tests of the
# crates the working tree changed (against HEAD, untracked files included). The crates that
# depend on them are `make test`'s: it stays the full suite CI runs.
#
#   BASE=<rev> make check   compare against <rev> instead of HEAD (e.g. origin/main).
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
BASE=${BASE:-HEAD}

$CARGO fmt --all -- --check

# Every workspace package with its directory and its workspace dependencies.
meta=$(mktemp)
trap 'rm -f "$meta"' EXIT
$CARGO metadata --format-version 1 --no-deps > "$meta"
changed=$( { git diff --name-only "$BASE" --; git ls-files --others --exclude-standard; } | sort -u)
if [ -z "$changed" ]; then
  echo "make check: nothing changed against $BASE"
  exit 0
fi
pkgs=$(python3 - "$changed" "$meta" <<'PY'
import json, os, sys
meta = json.load(open(sys.argv[2]))
root = os.getcwd()
files = [f for f in sys.argv[1].split("\n") if f]
pkgs = {p["name"]: os.path.relpath(os.path.dirname(p["manifest_path"]), root) for p in meta["packages"]}
def owner(f):
    best = None
    for name, d in pkgs.items():
        if d == "." or f.startswith(d + "/"):
            if best is None or len(d) > len(pkgs[best]):
                best = name
    return best
hit = {owner(f) for f in files} - {None}
# A change to the workspace manifest or lock file touches every package.
if any(f in ("Cargo.toml", "Cargo.lock") for f in files):
    hit = set(pkgs)
hit.discard("ringcast-hw-tests")  # hardware in the loop: make test-hw
print(" ".join(sorted(hit)))
PY
)
# The fuzz targets live outside the workspace (nightly, sanitizers): a change to a crate they
# read must still build them, or only CI's `make test-fuzz` finds the break.
if echo "$changed" | grep -qE '^(shared-abi|offload/(ring|proto|fuzz))/'; then
  if $CARGO +nightly fuzz --version >/dev/null 2>&1; then
    echo "make check: the fuzz targets"
    $CARGO +nightly fuzz build --fuzz-dir offload/fuzz
  else
    echo "make check: the fuzz targets not built (no nightly cargo-fuzz; make test-fuzz installs it)"
  fi
fi
if [ -z "$pkgs" ]; then
  echo "make check: no crate changed against $BASE"
  exit 0
fi
args=()
for p in $pkgs; do args+=(-p "$p"); done
echo "make check: ${pkgs}"
$CARGO clippy "${args[@]}" --all-targets -- -D warnings
$CARGO test "${args[@]}" --all-targets
