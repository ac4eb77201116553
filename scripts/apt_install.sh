#!/usr/bin/env bash
# Installs those of the given Debian packages that are missing (apt-get, as
# root or through sudo); prints what it installs, prefixed by WHO.
#
#   bash scripts/apt_install.sh WHO PACKAGE...
set -euo pipefail
who=$1
shift
missing=()
for package in "$@"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  echo "$who: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
