#!/usr/bin/env bash
# Build .corpus/corpus.txt (git-ignored) for lib/demo/train_demo.py from the licence and
# copyright texts of the Debian system it runs on (all redistributable verbatim):
#   1. /usr/share/common-licenses/*   (sorted by name)
#   2. /usr/share/doc/*/copyright     (sorted by path), skipping any file whose content
#      was already added (dedupe by sha256 of the content)
# Files are separated by one blank line; the total is capped at about MAX_BYTES
# (default 12 MB: a file that would cross the cap is not added, and collection stops).
# Also adds /.corpus/ to .git/info/exclude.
#
# Usage (from anywhere inside the repo):  bash lib/demo/make_corpus.sh [MAX_BYTES]
set -euo pipefail

MAX_BYTES="${1:-12000000}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT_DIR="$ROOT/.corpus"
OUT="$OUT_DIR/corpus.txt"

mkdir -p "$OUT_DIR"
if [ -d "$ROOT/.git/info" ] || mkdir -p "$ROOT/.git/info" 2>/dev/null; then
  EXCL="$ROOT/.git/info/exclude"
  touch "$EXCL"
  grep -qxF '/.corpus/' "$EXCL" || echo '/.corpus/' >> "$EXCL"
fi

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
: > "$tmp"
declare -A seen=()
total=0
nfiles=0
nskipped=0

add_file() {
  local f="$1"
  [ -f "$f" ] && [ -r "$f" ] || return 0
  # Text only: skip files with NUL bytes or that are not valid UTF-8.
  if grep -qP '\x00' "$f" 2>/dev/null || ! iconv -f UTF-8 -t UTF-8 "$f" >/dev/null 2>&1; then
    nskipped=$((nskipped + 1)); return 0
  fi
  local h size
  h="$(sha256sum < "$f" | cut -d' ' -f1)"
  if [ -n "${seen[$h]:-}" ]; then nskipped=$((nskipped + 1)); return 0; fi
  size="$(stat -L -c %s "$f")"
  if [ $((total + size + 2)) -gt "$MAX_BYTES" ]; then return 1; fi
  seen[$h]=1
  cat "$f" >> "$tmp"
  printf '\n\n' >> "$tmp"
  total=$((total + size + 2))
  nfiles=$((nfiles + 1))
  return 0
}

full=0
for f in $(LC_ALL=C ls -1 /usr/share/common-licenses/ 2>/dev/null); do
  add_file "/usr/share/common-licenses/$f" || { full=1; break; }
done
if [ "$full" = 0 ]; then
  while IFS= read -r f; do
    add_file "$f" || break
  done < <(LC_ALL=C ls -1d /usr/share/doc/*/copyright 2>/dev/null | LC_ALL=C sort)
fi

mv "$tmp" "$OUT"
trap - EXIT
echo "wrote $OUT: $(stat -c %s "$OUT") bytes from $nfiles files ($nskipped skipped as duplicate or non-text)"
sha256sum "$OUT"
