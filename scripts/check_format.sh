#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks clang-format (.clang-format) on the C++ lines changed since a base commit: the merge base
# with origin/main (or with --base REF) when that is behind HEAD, else the previous commit (HEAD~1:
# in CI's clone of main, origin/main is HEAD itself, so the newest commit is checked);
# uncommitted changes count.
# Only changed lines are checked, so untouched legacy code never fails it. Prints the diff that
# would fix the changed lines and exits 1 when there is one.
# Usage: scripts/check_format.sh [--base REF] [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
base=""
fix=0
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base="$2"; shift 2 ;;
    --fix) fix=1; shift ;;
    *) echo "usage: scripts/check_format.sh [--base REF] [--fix]" >&2; exit 2 ;;
  esac
done
format_diff=$(command -v clang-format-diff || command -v clang-format-diff-14 || true)
if [ -z "$format_diff" ] || ! command -v clang-format >/dev/null; then
  echo "check_format: clang-format / clang-format-diff not found (scripts/install_deps.sh installs them)" >&2
  exit 2
fi
if [ -n "$base" ]; then
  base=$(git merge-base HEAD "$base")  # never the other branch's own later changes
else
  if git rev-parse -q --verify origin/main >/dev/null &&
     [ "$(git merge-base HEAD origin/main)" != "$(git rev-parse HEAD)" ]; then
    base=$(git merge-base HEAD origin/main)
  elif git rev-parse -q --verify HEAD~1 >/dev/null; then
    base=HEAD~1
  else
    echo "check_format: no base commit (a single-commit history); nothing to check"
    exit 0
  fi
fi
paths=('*.cc' '*.h' '*.cpp' '*.hpp')
changed=$(git diff --name-only --diff-filter=d "$base" -- "${paths[@]}" | wc -l)
if [ "$fix" -eq 1 ]; then
  git diff -U0 --no-color "$base" -- "${paths[@]}" | "$format_diff" -p1 -i
  echo "check_format: reformatted the changed lines of ${changed} file(s)"
  exit 0
fi
fixes=$(git diff -U0 --no-color "$base" -- "${paths[@]}" | "$format_diff" -p1)
if [ -n "$fixes" ]; then
  printf '%s\n' "$fixes"
  echo "check_format: changed lines differ from .clang-format (base $(git rev-parse --short "$base")); fix with scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format: ok (${changed} changed C++ file(s) since $(git rev-parse --short "$base"))"
