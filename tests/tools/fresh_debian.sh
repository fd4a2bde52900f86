#!/usr/bin/env bash
# README's two commands on a really fresh Debian 12: a minimal root made by
# `debootstrap --variant=minbase bookworm` (no python3, no pip, no compiler),
# a copy of this checkout in it, and the commands run there as a new user runs
# them, as root in a chroot. A machine that already carries a Python with pip,
# a CUDA toolkit or the libraries hides what set-up forgets; this does not.
#
#   tests/tools/fresh_debian.sh [demo|test|both]    (default demo; run as root)
#
# demo runs `bash tools/demo.sh --steps 60` and checks that it trained, that
# the build said it is CPU-only in one line, and that the tools' packages went
# into the project's venv, not the system's Python. test runs `bash
# tools/test.sh` (the whole CPU-only suite; its tests took 4-5 minutes on 2 cores). CI runs demo.
# Environment: FSDP_FRESH_ROOT (where the root is made; default a temporary
# folder, removed afterwards unless FSDP_FRESH_KEEP=1), FSDP_DEBIAN_MIRROR.
set -euo pipefail
what=${1:-demo}
case $what in demo | test | both) ;; *) echo "usage: $0 [demo|test|both]" >&2; exit 2 ;; esac
repo=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "fresh_debian: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "fresh_debian: needs root (debootstrap, chroot, mount)" >&2; exit 1; }

if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
dir=${FSDP_FRESH_ROOT:-$(mktemp -d "${TMPDIR:-/tmp}/fresh_debian.XXXXXX")}
mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
  [ "${FSDP_FRESH_KEEP:-0}" != 1 ] && [ -z "${FSDP_FRESH_ROOT:-}" ] || return 0
  # Never remove through a mount that is still there: it would reach the host's /dev or /sys.
  if grep -qF " $dir/" /proc/mounts; then
    echo "fresh_debian: $dir still has mounts; not removed" >&2
  else
    rm -rf "$dir"
  fi
}
trap cleanup EXIT

t0=$SECONDS
fresh=0
if [ ! -x "$dir/bin/bash" ]; then
  fresh=1
  echo "fresh_debian: debootstrap --variant=minbase bookworm $dir"
  debootstrap --variant=minbase bookworm "$dir" "${FSDP_DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
    >"$dir.debootstrap.log" 2>&1 || { tail -20 "$dir.debootstrap.log" >&2; fail "debootstrap"; }
  rm -f "$dir.debootstrap.log"
  for p in python3 pip pip3 nvcc cmake g++; do
    ! chroot "$dir" sh -c "command -v $p" >/dev/null || fail "the fresh root already has $p"
  done
fi

# What the machine around the root provides: the kernel's file systems (Open
# MPI needs /proc, /sys and /dev/shm), name resolution, and the host's extra
# CA certificates (a TLS-inspecting proxy's, where there is one; Debian's
# ca-certificates, which set-up installs, merges them into its bundle).
# sys and dev with what is mounted below them (Slurm's slurmd needs the
# cgroup tree), as slaves, so that unmounting them here leaves the host's alone.
mkdir -p "$dir/proc" && mount -t proc proc "$dir/proc" && mounts+=("$dir/proc")
for m in sys dev; do
  mkdir -p "$dir/$m"
  mount --rbind "/$m" "$dir/$m" && mount --make-rslave "$dir/$m"
  mounts+=("$dir/$m")
done
# Without /etc/hosts (minbase has none) every MPI start waits 5 s on DNS for
# the host's own name; an installed Debian has one.
cp -L /etc/resolv.conf "$dir/etc/resolv.conf"
cp -L /etc/hosts "$dir/etc/hosts"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$dir/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/"
fi
# Services that packages install are not started inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d" && chmod +x "$dir/usr/sbin/policy-rc.d"

# The checkout as a clone holds it: tracked and untracked files, not ignored
# ones (a kept root keeps its build/ and .venv/ from the last run).
mkdir -p "$dir/root/fsdptrain"
find "$dir/root/fsdptrain" -mindepth 1 -maxdepth 1 ! -name build ! -name .venv -exec rm -rf {} +
git -C "$repo" ls-files -z --cached --others --exclude-standard |
  (cd "$repo" && xargs -0 tar cf - --no-recursion 2>/dev/null) | tar xf - -C "$dir/root/fsdptrain"
echo "fresh_debian: root ready in $((SECONDS - t0)) s"

# A clean environment, as a login shell has it. Only the host's pip settings
# for its network (index, certificate bundle) pass through.
in_root() {
  local env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
             LANG=C.UTF-8 TERM=dumb)
  local v
  for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_CERT http_proxy https_proxy; do
    [ -n "${!v:-}" ] && env+=("$v=${!v}")
  done
  chroot "$dir" /usr/bin/env -i "${env[@]}" bash -c "cd /root/fsdptrain && $1"
}

if [ "$what" != test ]; then
  t0=$SECONDS
  log=$dir/root/demo.log
  in_root "bash tools/demo.sh --steps 60 --eval-every 60" >"$log" 2>&1 || {
    tail -40 "$log" >&2; fail "README command (1) failed"; }
  echo "fresh_debian: README command (1) ran in $((SECONDS - t0)) s"
  grep -q "^build: no CUDA toolkit (nvcc) found" "$log" || fail "no CPU-only line from the build"
  [ "$(grep -c "CUDA" "$log")" -eq 1 ] || { grep CUDA "$log" >&2; fail "CUDA named more than once"; }
  val=$(sed -n 's/.*val_loss[ =:]*\([0-9.]*\).*/\1/p' "$log" | tail -1)
  [ -n "$val" ] || { tail -20 "$log" >&2; fail "the demo printed no validation loss"; }
  awk -v v="$val" 'BEGIN { exit !(v < 4.0) }' || fail "validation loss $val: the demo did not train"
  echo "fresh_debian: demo validation loss $val after 60 steps (5.53 untrained)"
  in_root "! python3 -c 'import numpy' 2>/dev/null && .venv/bin/python -c 'import numpy, h5py'" ||
    fail "the tools' packages are not in .venv only"
  [ "$fresh" = 0 ] || { [ ! -d "$dir/root/fsdptrain/build/tests" ] &&
                         [ ! -e "$dir/root/fsdptrain/build/bench/checkpoint_bench" ]; } ||
    fail "command (1) should build the program and its tools, not the tests or benchmarks"
fi
if [ "$what" != demo ]; then
  t0=$SECONDS
  log=$dir/root/test.log
  in_root "bash tools/test.sh" >"$log" 2>&1 || { tail -60 "$log" >&2; fail "README command (2) failed"; }
  echo "fresh_debian: README command (2) ran in $((SECONDS - t0)) s"
  grep -E "tests passed|tests failed" "$log"
fi
echo "fresh_debian: ok"
