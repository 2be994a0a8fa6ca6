#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Differential testing campaign (issue 24): N random programs, each at O0, O1 and O2 and under the
# CPython + numpy oracle (tests/python/difftest.py). Mismatches are minimized into
# build/difftest/mismatch_SEED.py. Needs a built build/tools/shapevm (or SHAPEVM_BIN).
# Usage: scripts/difftest.sh N [--seed S] [--no-minimize]     (DIFFTEST_SEED also sets the seed)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then echo "usage: scripts/difftest.sh N [--seed S] [--no-minimize]" >&2; exit 2; fi
export SHAPEVM_CACHE_DIR="${SHAPEVM_CACHE_DIR:-$PWD/build/difftest/cache}"
exec /usr/bin/python3 tests/python/difftest.py "$@" --out build/difftest
