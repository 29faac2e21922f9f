#!/bin/sh
# Writes the git commit of the package at $1 into the Swift file $2 (run by the BuildInfo plugin
# whenever the repository's HEAD or its reflog changed, and on a first build). Order: git (12 hex
# digits of HEAD), else $HERALD_COMMIT, else "unknown".
# The file is replaced only when its text changes, so an unchanged commit recompiles nothing.
set -u
package="$1"
file="$2"
commit=""
if command -v git >/dev/null 2>&1; then
    commit=$(git -C "$package" rev-parse --short=12 HEAD 2>/dev/null || true)
fi
[ -n "$commit" ] || commit="${HERALD_COMMIT:-}"
[ -n "$commit" ] || commit="unknown"
# Only what is safe inside a Swift string literal and a Prometheus label value.
commit=$(printf '%s' "$commit" | tr -cd 'A-Za-z0-9._+-' | cut -c1-64)
[ -n "$commit" ] || commit="unknown"
mkdir -p "$(dirname "$file")"
text="// Written by Plugins/BuildInfo/build-commit.sh; not in git.
let buildCommit = \"$commit\""
if [ -f "$file" ] && [ "$(cat "$file")" = "$text" ]; then
    exit 0
fi
printf '%s\n' "$text" > "$file.tmp" && mv "$file.tmp" "$file"
