#!/usr/bin/env bash
# The device kit (issue 19): the libraries conductor builds against that a bare GPU node (CUDA, CMake, a C++
# compiler; no root) lacks, as Debian 12 packages unpacked into <repo>/.gpu-kit (ignored by git, carried along to
# the GPU machine with the checkout), plus .gpu-kit/env.sh, which makes CMake, the linker and Open MPI use them
# from wherever the checkout lies. Run it here, where Debian's apt repositories are reachable:
#   scripts/gpu-kit.sh            builds the kit (replaces an existing one)
#   . .gpu-kit/env.sh             on the GPU node (jobs/device-check.sh does it when the system lacks the libraries)
# Usage: scripts/gpu-kit.sh   (no arguments; GPU_KIT names another kit folder)
# LibTorch and CUDA are not in the kit: the GPU node brings CUDA, and the device check builds without the policy
# layer when it finds no LibTorch.
#
# Two kinds of packages: the kit's own (Open MPI and its PMIx/hwloc/libevent, HDF5, yaml-cpp, OpenBLAS,
# GoogleTest, nlohmann-json, zlib headers), always used, and runtime dependencies that most images already have
# (libcurl and its TLS/Kerberos stack for HDF5, libgfortran for OpenBLAS, libudev for hwloc, ...): those go to
# .gpu-kit/fallback and env.sh puts one on the library path only where the node has no library of that soname,
# so the node's own programs (cmake, python) keep their own copies. Plugins of Open MPI and PMIx that need
# libraries outside the kit (UCX, libfabric, verbs, PSM: fabrics a one-node check does not use) are dropped.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/usage.sh"
script_help "$0" "$@"
[[ $# -eq 0 ]] || refuse_arguments gpu-kit "none" "$1"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KIT=${GPU_KIT:-$ROOT/.gpu-kit}
ARCH_TRIPLET=x86_64-linux-gnu
LIMIT_MIB=40  # well under the 64 MiB that travels with the checkout

core=(
  openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libhwloc15
  libhdf5-103-1 libhdf5-dev libsz2 libaec0
  libyaml-cpp0.7 libyaml-cpp-dev
  libopenblas0-pthread libopenblas-pthread-dev
  libgtest-dev nlohmann-json3-dev zlib1g-dev
)
fallback=(
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libgfortran5 libquadmath0 libmunge2 libnuma1 libltdl7 libudev1 libpciaccess0
  libcurl4 libssl3 libnghttp2-14 libpsl5 librtmp1 libssh2-1 libldap-2.5-0 libsasl2-2 libgssapi-krb5-2 libkrb5-3
  libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 libbrotli1 libzstd1 libidn2-0 libunistring2 libgnutls30
  libhogweed6 libnettle8 libgmp10 libp11-kit0 libtasn1-6 libffi8
)
# Libraries every Linux image with a C++ compiler has (glibc, the GCC runtime, zlib): never shipped.
base_re='^(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libutil\.so\.1|libresolv\.so\.2|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libgomp\.so\.1|libz\.so\.1)$'

say() { echo "gpu-kit: $*"; }
die() {
  echo "gpu-kit: $*" >&2
  exit 1
}

command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "needs apt-get and dpkg-deb (a Debian 12 machine)"
grep -q 'VERSION_ID="12"' /etc/os-release 2>/dev/null || say "warning: not Debian 12; the kit is built from this system's apt sources"

rm -rf "$KIT"
mkdir -p "$KIT/fallback/root" "$KIT/fallback/lib"
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
chmod 777 "$debs"  # apt's _apt user downloads into it
if ! (cd "$debs" && apt-get download "${core[@]}" "${fallback[@]}" >/dev/null); then
  die "apt-get download failed (run apt-get update first, as root, if the package lists are missing)"
fi
for p in "${core[@]}"; do dpkg-deb -x "$debs/${p}"_*.deb "$KIT"; done
for p in "${fallback[@]}"; do dpkg-deb -x "$debs/${p}"_*.deb "$KIT/fallback/root"; done
(cd "$debs" && ls ./*.deb | sed 's|^\./||; s|\.deb$||') >"$KIT/packages.txt"

# ---- prune what neither the build nor the run needs: docs, static libraries (GoogleTest ships only those),
# Fortran/Java/OpenSHMEM bindings, the full HDF5 C++/Fortran/high-level libraries, fallback non-libraries ----
L=$KIT/usr/lib/$ARCH_TRIPLET
rm -rf "$KIT/usr/share/doc" "$KIT/usr/share/man" "$KIT/usr/share/lintian" "$L/fortran" "$L/openmpi/lib/"*.mod
find "$KIT/usr" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
find "$L" \( -name 'libmpi_mpifh*' -o -name 'libmpi_usempi*' -o -name 'libmpi_java*' -o -name 'liboshmem*' \
  -o -name 'libhdf5*fortran*' -o -name 'libhdf5*_cpp*' -o -name 'libhdf5*_hl*' -o -name 'mpi.jar' \
  -o -name 'liblapack*' \) -exec rm -rf {} +
rm -f "$KIT/usr/bin/"{mpif77,mpif90,mpifort,mpijavac,oshCC,oshc++,oshcc,oshcxx,oshfort,oshmem_info,oshrun}* \
  "$KIT/usr/bin/"shmem*
find "$KIT/fallback/root" \( -name '*.so.*' -o -name '*.so' \) \( -type f -o -type l \) -exec mv -t "$KIT/fallback/lib" {} +
rm -rf "$KIT/fallback/root"

# ---- every ELF file's NEEDED sonames must resolve within the kit or the base set; plugins that cannot are
# dropped (repeat: dropping one can orphan another), anything else unresolved is an error ----
declare -A have
index_sonames() {
  have=()
  local f
  while IFS= read -r f; do have[$(basename "$f")]=1; done < <(find "$KIT" \( -name '*.so' -o -name '*.so.*' \) \( -type f -o -type l \))
}
unresolved() {  # prints the NEEDED sonames of ELF file $1 that neither the kit nor the base set provides
  local n
  for n in $(readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [[ $n =~ $base_re || -n ${have[$n]:-} ]] || echo "$n"
  done
}
dropped=()
while :; do
  index_sonames
  changed=0
  while IFS= read -r f; do
    missing=$(unresolved "$f")
    [[ -z $missing ]] && continue
    case $f in
      */openmpi3/mca_* | */pmix/pmix_mca_* | */libmca_common_ucx* | */libmca_common_ofi* | */libmca_common_verbs*)
        dropped+=("$(basename "$f") ($(echo $missing))")
        rm -f "$f"
        changed=1
        ;;
      *) die "$f needs $(echo $missing), which neither the kit nor the base set provides: add its package" ;;
    esac
  done < <(find "$KIT" -type f \( -name '*.so*' -o -path '*/bin/*' \) -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
  ((changed)) || break
done
find -L "$KIT" -type l -delete 2>/dev/null || true  # links left dangling by the pruning
say "dropped ${#dropped[@]} plugins that need fabrics outside the kit: ${dropped[*]:-none}"

# ---- what Debian's alternatives would link at install time ----
(cd "$KIT/usr/bin" && for w in mpicc mpicxx mpic++ mpiCC; do ln -sf opal_wrapper "$w"; done &&
  ln -sf orterun mpiexec && ln -sf orterun mpirun)

# ---- the oldest glibc the kit's own binaries accept, and each fallback library's (env.sh checks those it uses:
# Debian 12's libevent needs glibc 2.36, so a node with glibc 2.35 works only if it has its own libevent) ----
glibc_of() { (objdump -T "$@" 2>/dev/null || true) | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1; }
glibc_min=$(find "$KIT/usr" -type f \( -name '*.so*' -o -path '*/bin/*' \) -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print |
  xargs objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
for f in "$KIT"/fallback/lib/*.so*; do  # SONAME and glibc of each fallback library: env.sh reads them
  [[ -f $f && ! -L $f ]] || continue
  soname=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  if [[ -n $soname ]]; then echo "$soname $(glibc_of "$f")"; fi
done | sort >"$KIT/fallback/sonames.txt"

# ---- the big files travel gzipped (OpenBLAS alone is 36 MB with its kernels for every x86 CPU); env.sh unpacks
# them next to themselves the first time it runs ----
find "$KIT" -type f -size +128k ! -name '*.h' -exec gzip -9 {} +

cat >"$KIT/env.sh" <<EOF
# Generated by scripts/gpu-kit.sh on $(date -u '+%Y-%m-%d') from Debian 12 packages (list: packages.txt).
# Source it (. .gpu-kit/env.sh) from any directory: the kit finds itself, so the checkout may lie anywhere.
GPU_KIT=\$(cd "\$(dirname "\${BASH_SOURCE[0]:-\$0}")" && pwd)
export GPU_KIT
GPU_KIT_GLIBC_MIN=$glibc_min
_gk_glibc=\$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print \$2}')
if [[ -n \$_gk_glibc && \$(printf '%s\n' "\$GPU_KIT_GLIBC_MIN" "\$_gk_glibc" | sort -V | head -1) != "\$GPU_KIT_GLIBC_MIN" ]]; then
  echo "gpu-kit: this system's glibc \$_gk_glibc is older than the \$GPU_KIT_GLIBC_MIN the kit's libraries need" >&2
  return 1 2>/dev/null || exit 1
fi
_gk_u=\$GPU_KIT/usr
while IFS= read -r _gk_f; do
  [[ -f \${_gk_f%.gz} ]] && continue
  gzip -dc "\$_gk_f" >"\${_gk_f%.gz}.tmp\$\$" && mv "\${_gk_f%.gz}.tmp\$\$" "\${_gk_f%.gz}"
done < <(find "\$GPU_KIT" -name '*.gz' -type f)
_gk_l=\$_gk_u/lib/$ARCH_TRIPLET
# Runtime dependencies the system lacks (by soname): links in fallback/needed, which alone goes on the path.
mkdir -p "\$GPU_KIT/fallback/needed"
while read -r _gk_n _gk_v; do
  /sbin/ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*\$_gk_n " && continue
  ln -sf "\$GPU_KIT/fallback/lib/\$_gk_n" "\$GPU_KIT/fallback/needed/\$_gk_n"
  if [[ -n \$_gk_glibc && -n \$_gk_v && \$(printf '%s\n' "\$_gk_v" "\$_gk_glibc" | sort -V | head -1) != "\$_gk_v" ]]; then
    echo "gpu-kit: this system lacks \$_gk_n, and the kit's copy needs glibc \$_gk_v (the system has \$_gk_glibc)" >&2
    return 1 2>/dev/null || exit 1
  fi
done <"\$GPU_KIT/fallback/sonames.txt"
export CMAKE_PREFIX_PATH=\$_gk_u\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}
# OpenBLAS lives in a subfolder (Debian's alternatives link it at install time); find_path/find_library read these.
export CMAKE_INCLUDE_PATH=\$_gk_u/include/$ARCH_TRIPLET/openblas-pthread\${CMAKE_INCLUDE_PATH:+:\$CMAKE_INCLUDE_PATH}
export CMAKE_LIBRARY_PATH=\$_gk_l/openblas-pthread\${CMAKE_LIBRARY_PATH:+:\$CMAKE_LIBRARY_PATH}
export LD_LIBRARY_PATH=\$_gk_l:\$_gk_l/openblas-pthread:\$_gk_l/hdf5/serial:\$_gk_l/openmpi/lib:\$_gk_l/pmix2/lib:\$GPU_KIT/fallback/needed\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export PATH=\$_gk_u/bin:\$PATH
# Open MPI was configured for /usr with Debian's own libdir/includedir: each relocated directory is named.
export OPAL_PREFIX=\$_gk_u OPAL_EXEC_PREFIX=\$_gk_u OPAL_BINDIR=\$_gk_u/bin OPAL_LIBEXECDIR=\$_gk_u/libexec
export OPAL_DATAROOTDIR=\$_gk_u/share OPAL_DATADIR=\$_gk_u/share OPAL_PKGDATADIR=\$_gk_u/share/openmpi
export OPAL_LIBDIR=\$_gk_l/openmpi/lib OPAL_PKGLIBDIR=\$_gk_l/openmpi/lib/openmpi3
export OPAL_INCLUDEDIR=\$_gk_l/openmpi/include OPAL_PKGINCLUDEDIR=\$_gk_l/openmpi/include/openmpi
export OPAL_SYSCONFDIR=\$GPU_KIT/etc/openmpi
# PMIx (external to Open MPI in Debian) finds its plugins and help files the same way.
export PMIX_PREFIX=\$_gk_l/pmix2 PMIX_LIBDIR=\$_gk_l/pmix2/lib PMIX_PKGLIBDIR=\$_gk_l/pmix2/lib/pmix
export PMIX_DATADIR=\$_gk_l/pmix2/share PMIX_PKGDATADIR=\$_gk_l/pmix2/share/pmix PMIX_SYSCONFDIR=\$_gk_l/pmix2/etc
# One node: shared memory and TCP only (the fabric plugins were dropped).
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp
unset _gk_u _gk_l _gk_f _gk_n _gk_v _gk_glibc
EOF

size=$(du -sm --apparent-size "$KIT" | cut -f1)
say "$KIT: $(wc -l <"$KIT/packages.txt") packages, ${size} MiB, needs glibc >= $glibc_min"
((size <= LIMIT_MIB)) || die "the kit is ${size} MiB, over its ${LIMIT_MIB} MiB limit (it travels with the checkout)"
