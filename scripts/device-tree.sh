#!/usr/bin/env bash
# The working tree that travels to a GPU machine is limited to 64 MiB (tracked files plus
# untracked ones git does not ignore); the repository is larger. `hide` takes the paths a GPU
# run does not read out of git's index and ignores them (.git/info/exclude), so they stay on
# disk but do not travel; `restore` puts them back. Never commit between the two.
#   bash scripts/device-tree.sh hide      before a device run
#   bash scripts/device-tree.sh hide-all  before a run that needs only scripts/ (carrying the
#                                         rest: scripts/device-model.sh's parts)
#   bash scripts/device-tree.sh restore   after either
set -euo pipefail
cd "$(dirname "$0")/.."
PATHS=(data bench/results tests/fixtures/tokenizer tests/fixtures/models tests/fixtures/chat_templates
       tests/fixtures/golden/smollm2-chat tests/fixtures/golden/smollm2-long tests/fixtures/golden/smollm2-prose)
# DEVICE_KEEP="path ...": paths of the list above that travel this time (a SmolLM2 golden case
# for the GPU's real-model test: 0.6-1 MB each).
for keep in ${DEVICE_KEEP:-}; do
  for i in "${!PATHS[@]}"; do [ "${PATHS[$i]}" = "$keep" ] && unset 'PATHS[i]'; done
done
PATHS=("${PATHS[@]}")
MARK="# device-tree.sh hide"
# While hidden, a commit would record the hidden paths as deleted: a pre-commit hook refuses
# commits until `restore` (installed by hide, removed by restore).
HOOK=.git/hooks/pre-commit
guard() {
  mkdir -p .git/hooks
  printf '#!/bin/sh\n# installed by scripts/device-tree.sh hide\necho "device-tree.sh: paths are hidden from the index; run bash scripts/device-tree.sh restore before committing" >&2\nexit 1\n' > $HOOK
  chmod +x $HOOK
}
case "${1:-}" in
  hide)
    grep -qx "$MARK" .git/info/exclude 2>/dev/null && { echo "device-tree.sh: already hidden; restore first" >&2; exit 2; }
    guard
    git rm -r -q --cached "${PATHS[@]}"
    { echo "$MARK"; for p in "${PATHS[@]}"; do echo "/$p/"; done; } >> .git/info/exclude
    echo "travels: $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes tracked (limit 67108864 with what is carried)"
    ;;
  hide-all)
    grep -qx "$MARK" .git/info/exclude 2>/dev/null && { echo "device-tree.sh: already hidden; restore first" >&2; exit 2; }
    guard
    git rm -r -q --cached -- . ':!scripts' ':!.gitignore'
    { echo "$MARK"; echo "/*"; echo "!/scripts/"; echo "!/.gitignore"; } >> .git/info/exclude
    echo "travels: $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes tracked (scripts/ only)"
    ;;
  restore)
    git reset -q
    sed -i "/^$MARK\$/,\$d" .git/info/exclude
    grep -q "installed by scripts/device-tree.sh hide" $HOOK 2>/dev/null && rm -f $HOOK
    git status --short | head
    ;;
  *) echo "usage: $0 hide|hide-all|restore" >&2; exit 2 ;;
esac
