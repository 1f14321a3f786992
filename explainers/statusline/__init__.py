"""The Claude Code status line shown on the Snippets page: a bash script and its runner.

Files, one job each:

- ``statusline.sh`` is the script a reader copies: it reads the session's JSON on stdin
  and prints the context window's remaining percentage (bash and jq);
- :mod:`.runner` runs it, or a variant of it, the way Claude Code would: bash, jq,
  the JSON on stdin.

>>> from explainers.statusline.runner import SCRIPT
>>> SCRIPT.name
'statusline.sh'
"""
