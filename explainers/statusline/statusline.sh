#!/usr/bin/env bash
# Claude Code status line - shows context window remaining percentage.
# Reads the session JSON on stdin. Prints nothing, and exits 0, unless stdin
# is one JSON document whose .context_window.remaining_percentage is a number.

# Read all of stdin. `read -d ''` stops at the first NUL byte (status 0) or at
# the end of the input (status 1). JSON never contains a raw NUL and a bash
# variable cannot hold one, so input with a NUL prints nothing.
if IFS= read -r -d '' input; then
  exit 0
fi
# -s gathers every document into one array and `length == 1` accepts exactly
# one, so `{...} {}` prints nothing instead of the first document's number.
# `numbers` drops strings, null and the rest. Parse errors are silenced: a
# status line is redrawn often and has nowhere to report them.
remaining=$(printf '%s' "$input" | jq -rs \
  'if length == 1 then .[0].context_window.remaining_percentage | numbers else empty end' 2>/dev/null)

# Belt and braces: print only a plain number, never other characters.
if [[ $remaining =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then
  printf 'Context: %s%% remaining' "$remaining"
fi
