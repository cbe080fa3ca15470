#!/usr/bin/env bash
# Run HERE (a Debian machine with network) before a GPU session: downloads, without installing,
# the Debian packages trainlab builds against into .debs/ (git-ignored through .git/info/exclude),
# for scripts/device-check.sh to unpack on a GPU machine that has no apt and no network. About 20 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
# The build's packages and, since dpkg -x follows no dependency, the libraries they need
# (scripts/packages.sh: one list, shared with install-deps.sh; tests/check_packages.py checks it).
source scripts/packages.sh
packages=("${TRAINLAB_BUILD_PACKAGES[@]}" "${TRAINLAB_DEVICE_RUNTIME_PACKAGES[@]}")
# (git's own path for it: .git is a file in a worktree; no git, nothing to exclude)
exclude=$(git rev-parse --git-path info/exclude 2> /dev/null || true)
if [ -n "$exclude" ]; then
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.debs/' "$exclude" 2> /dev/null || echo '/.debs/' >> "$exclude"
fi
mkdir -p .debs
cd .debs
rm -f ./*.deb  # only what the list names now
apt-get download "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
for package in "${packages[@]}"; do
  ls "${package}"_*.deb > /dev/null 2>&1 || { echo "fetch-device-debs: $package was not downloaded" >&2; exit 1; }
done
echo "fetch-device-debs: $(ls ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in .debs/ (carry it: carry=[\".debs\"])"
