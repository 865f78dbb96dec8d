#!/usr/bin/env bash
# Installs the Debian packages conductor needs that are missing. As root it runs apt-get; otherwise it prints
# the exact command to run. Usage: scripts/deps.sh [--check]
set -euo pipefail
. "$(dirname "$0")/usage.sh"
script_help "$0" "$@"
[[ $# -eq 0 || ( $# -eq 1 && $1 == --check ) ]] || refuse_arguments deps "--check" "${@:$([[ ${1:-} == --check ]] && echo 2 || echo 1)}"
packages=(
  cmake make g++ git pkg-config clang-format
  libopenmpi-dev openmpi-bin
  libhdf5-dev hdf5-tools
  libyaml-cpp-dev
  libtorch-dev
  libgtest-dev
  libopenblas-dev
  nlohmann-json3-dev
  python3 python3-h5py python3-numpy python3-matplotlib
  munge slurmctld slurmd slurm-client  # the real Slurm test (ctest -L slurm)
)
missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "deps: all ${#packages[@]} Debian packages are installed"
  exit 0
fi
cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y ${missing[*]}"
if [[ "${1:-}" == "--check" ]]; then
  echo "deps: missing: ${missing[*]}"
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "deps: missing Debian packages: ${missing[*]}"
  echo "deps: run as root:  $cmd"
  exit 1
fi
echo "deps: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
