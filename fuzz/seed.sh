#!/bin/sh
# Seeds fuzz/corpus/ from the conformance transcripts and fuzz/seeds/: whole transcripts for
# decode and roundtrip, the code of every execute line (plus seeds/guest/*.js) for guest.
# Files are named by the SHA-1 of their content, as libFuzzer names its own, so reruns add
# nothing twice. Needs jq and sha1sum.
set -eu
cd "$(dirname "$0")"
add() { # add TARGET FILE
    name=$(sha1sum "$2" | cut -c1-40)
    mkdir -p "corpus/$1"
    cp "$2" "corpus/$1/$name"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in ../conformance/transcripts/*/*.ndjson; do
    add decode "$f"
    add roundtrip "$f"
    # Lines that are not JSON (robustness transcripts) are skipped.
    jq -cR 'fromjson? | select(type == "object" and .type == "execute" and (.code | type) == "string") | .code' "$f" |
        while IFS= read -r code; do
            printf '%s' "$code" | jq -j . >"$tmp/code"
            add guest "$tmp/code"
        done
done
for f in seeds/guest/*.js; do
    add guest "$f"
done
mkdir -p corpus/session
for t in decode roundtrip guest session; do
    printf '%s: %s files\n' "$t" "$(ls "corpus/$t" | wc -l)"
done
