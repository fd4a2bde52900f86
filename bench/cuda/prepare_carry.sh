#!/usr/bin/env bash
# prepare_carry.sh - run HERE (the build machine) before a GPU session.
#
# The GPU machine has the driver, nvcc and PyTorch with the nvidia-* wheels but
# no Open MPI, HDF5, Boost or GoogleTest and no network, so nothing is built
# there. This builds everything here and puts into .gpu_carry/ (git-ignored):
#   fsdp-bundle.tar.xz  fsdptrain, the GPU test and benchmark programs, mpirun,
#                       and every library they need except CUDA's
#                       (../shared/gpu-node/make_bundle.sh; env.sh inside)
#   example/            kjv_train.h5, kjv_val.h5 (byte tokens, vocab 256)
#   BUILD_INFO.txt      which tree the programs were built from
# then, in the GPU session:
#   run(command="bash bench/cuda/run_gpu_checks.sh", carry=[".gpu_carry"], timeout_s=600)
#
# Incremental: the build is ninja's; the bundle is remade only when a program
# in it is newer than the archive (xz -9e is most of a fresh run's time).
# Knobs: BUILD_DIR (default ./build-gpu-bundle; never ./build, which another
# build may be using), GPU_NODE_DIR (default ../shared/gpu-node), FORCE=1.
#
# A speed lever's before and after (check group k, bench/cuda/checks_k.sh):
# BASELINE=REV also builds fsdptrain as the tree was at commit REV (a git
# worktree in build-gpu-baseline/, incremental, its own ninja build, the
# program alone) and bundles it as bin/fsdptrain-base:
#   BASELINE=HEAD~1 bash bench/cuda/prepare_carry.sh
#
# A CPU rehearsal needs none of that: REHEARSAL_FROM=build copies an existing
# build's programs (a snapshot: that build may be remade meanwhile) into a
# bundle that runs only on this machine (its own libraries and mpirun), in
# CARRY (default /tmp/rehearsal_carry; never .gpu_carry, so it cannot travel
# to a GPU by mistake); nothing is built:
#   REHEARSAL_FROM=build bash bench/cuda/prepare_carry.sh
#   CARRY=/tmp/rehearsal_carry CHECK_DEVICE=cpu STEPS=n bash bench/cuda/run_gpu_checks.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
source tools/python_env.sh

# verse_documents DIR: DIR/kjv_lines_{train,val}.h5, the example's bytes with
# the newline (10) as the end of text, each verse a document: the data of
# --document-mask's checks (c7, c8).
verse_documents() {
  "$fsdp_python" - "$1" <<'PY'
import shutil, sys, h5py
d = sys.argv[1]
for split in ("train", "val"):
    dst = f"{d}/kjv_lines_{split}.h5"
    shutil.copyfile(f"{d}/kjv_{split}.h5", dst)
    with h5py.File(dst, "r+") as f:
        f["tokens"].attrs["eos_id"] = 10
PY
}

if [ -n "${REHEARSAL_FROM:-}" ]; then
  from=$(cd "$REHEARSAL_FROM" && pwd)
  out=${CARRY:-/tmp/rehearsal_carry}
  mkdir -p "$out" && out=$(cd "$out" && pwd)
  [ "$out" != "$root/.gpu_carry" ] || { echo "prepare_carry: error: a rehearsal carry must not be .gpu_carry" >&2; exit 1; }
  [ -x "$from/src/fsdptrain" ] || { echo "prepare_carry: error: no $from/src/fsdptrain" >&2; exit 1; }
  stage=$out/stage/fsdp-bundle
  rm -rf "$out/stage" "$out/fsdp-bundle.tar.xz" && mkdir -p "$stage/bin" "$out/example"
  for p in src/fsdptrain tests/model/cuda/test_cuda_ops tests/model/cuda/test_cuda_model \
           tests/comm/test_comm_nccl_communicator bench/cuda/bench_cuda_ops; do
    if [ -x "$from/$p" ]; then cp "$from/$p" "$stage/bin/"; else echo "prepare_carry: (no $from/$p)"; fi
  done
  # BASELINE_BIN=PROGRAM: a baseline for group k's logic (any fsdptrain; the
  # rehearsal's own gives a before and after of one program)
  [ -z "${BASELINE_BIN:-}" ] || cp "$BASELINE_BIN" "$stage/bin/fsdptrain-base"
  cat > "$stage/env.sh" <<'ENV'
# A rehearsal bundle (prepare_carry.sh REHEARSAL_FROM): programs of a build on
# this machine, which has their libraries and mpirun itself.
export _FSDP_ORIG_SET=1 _FSDP_ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
export PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "fsdp-bundle: rehearsal: $(command -v fsdptrain)" >&2
ENV
  XZ_OPT=-1 tar -cJf "$out/fsdp-bundle.tar.xz" -C "$out/stage" fsdp-bundle && rm -rf "$out/stage"
  bash tools/make_example.sh "$out/example"
  verse_documents "$out/example"
  { echo "rehearsal carry: programs of $from, $(date -u +%FT%TZ) (HEAD $(git rev-parse --short HEAD), working tree as it is)"
    [ -z "${BASELINE_BIN:-}" ] || echo "baseline: rehearsal copy of $BASELINE_BIN"
    (cd "$from" && sha256sum src/fsdptrain | sed 's/^/  /'); } > "$out/BUILD_INFO.txt"
  echo "prepare_carry: ready: CARRY=$out CHECK_DEVICE=cpu bash bench/cuda/run_gpu_checks.sh"
  exit 0
fi
build=${BUILD_DIR:-$root/build-gpu-bundle}
node=${GPU_NODE_DIR:-$root/../shared/gpu-node}
carry=$root/.gpu_carry
limit_mib=64   # the device tool carries at most 64 MiB: working tree + carry

say() { echo "prepare_carry: $*"; }
[ -x "$node/make_bundle.sh" ] || { say "error: no $node/make_bundle.sh (set GPU_NODE_DIR)"; exit 1; }
command -v patchelf >/dev/null || {
  say "installing patchelf (make_bundle.sh sets \$ORIGIN rpaths with it)"
  apt-get install -y -q patchelf >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q patchelf >/dev/null; }
}

# ---- 1. build (tools/build.sh: set-up check + incremental ninja build) ---------------
BUILD_DIR=$build bash tools/build.sh test
bins=(
  "$build/tests/model/cuda/test_cuda_ops"
  "$build/tests/model/cuda/test_cuda_model"
  "$build/tests/comm/test_comm_nccl_communicator"
  "$build/bench/cuda/bench_cuda_ops"
)
for b in "$build/src/fsdptrain" "${bins[@]}"; do
  [ -x "$b" ] || { say "error: $b was not built (is nvcc there? the GPU programs need FSDP_CUDA)"; exit 1; }
done

# ---- 1b. the baseline (BASELINE=REV): fsdptrain at REV, as bin/fsdptrain-base -----------
base=$root/build-gpu-baseline
base_info=""
if [ -n "${BASELINE:-}" ]; then
  rev=$(git rev-parse --verify --quiet "${BASELINE}^{commit}") ||
    { say "error: BASELINE=$BASELINE is not a commit of this repository"; exit 1; }
  git worktree prune
  if [ -e "$base/tree/.git" ]; then
    git -C "$base/tree" checkout -q --detach "$rev"   # only changed files: ninja stays incremental
  else
    mkdir -p "$base" && git worktree add -q --detach "$base/tree" "$rev"
  fi
  if [ ! -f "$base/build/build.ninja" ]; then
    say "configuring the baseline build (its first build takes minutes)"
    python=$(sed -n 's/^Python3_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt")
    cmake -S "$base/tree" -B "$base/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DPython3_EXECUTABLE:FILEPATH="$python" > "$base/configure.log" 2>&1 ||
      { cat "$base/configure.log" >&2; exit 1; }
  fi
  say "building fsdptrain at $(git rev-parse --short "$rev") (the baseline)"
  cmake --build "$base/build" -j "$(nproc)" --target fsdptrain
  mkdir -p "$base/bin"
  cp -p "$base/build/src/fsdptrain" "$base/bin/fsdptrain-base"
  bins+=("$base/bin/fsdptrain-base")
  base_info="$(git rev-parse "$rev") $(git log -1 --format=%s "$rev" | head -c 80)"
fi

# ---- 2. example data -------------------------------------------------------------------
bash tools/make_example.sh "$build/example"

# ---- 3. the bundle ---------------------------------------------------------------------
bundle=$build/gpu-bundle/fsdp-bundle
newer=$(find "$build/src/fsdptrain" "${bins[@]}" "$node/make_bundle.sh" "$node/env.sh" \
        -newer "$bundle.tar.xz" 2>/dev/null | head -1 || true)
# the bundle holds a baseline exactly when this run asked for one
had_base=$(tar -tJf "$bundle.tar.xz" 2>/dev/null | grep -c 'bin/fsdptrain-base$' || true)
want_base=$([ -n "$base_info" ] && echo 1 || echo 0)
if [ -n "${FORCE:-}" ] || [ ! -f "$bundle.tar.xz" ] || [ -n "$newer" ] || [ "${had_base:-0}" != "$want_base" ]; then
  say "bundling (xz -9e: a few minutes on 2 cores)"
  EXTRA_BINS="${bins[*]}" bash "$node/make_bundle.sh" "$build/src/fsdptrain" "$bundle"
else
  say "bundle $bundle.tar.xz is newer than its programs: kept"
fi

# ---- 4. .gpu_carry -----------------------------------------------------------------------
grep -qx '/.gpu_carry/' .gitignore 2>/dev/null || grep -qx '/.gpu_carry/' .git/info/exclude 2>/dev/null ||
  echo '/.gpu_carry/' >> .git/info/exclude
rm -rf "$carry" && mkdir -p "$carry/example"
cp "$bundle.tar.xz" "$carry/fsdp-bundle.tar.xz"
cp "$build/example/kjv_train.h5" "$build/example/kjv_val.h5" "$carry/example/"
verse_documents "$carry/example"
{
  echo "built $(date -u +%FT%TZ) on $(hostname) ($(. /etc/os-release; echo "$PRETTY_NAME")) into $build"
  echo "HEAD $(git rev-parse HEAD) $(git log -1 --format=%s | head -c 100)"
  [ -z "$base_info" ] || echo "baseline: $base_info (bin/fsdptrain-base, check group k)"
  # the programs come from the working tree, which may differ from HEAD
  dirty=$(git status --short --untracked-files=normal -- . ':!.gpu_carry' | wc -l)
  echo "working tree: $dirty changed/untracked path(s); diff vs HEAD sha256 $(git diff HEAD | sha256sum | cut -c1-16)"
  git status --short | head -40
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "programs (sha256):"
  (cd "$build" && sha256sum src/fsdptrain "${bins[@]#"$build"/}" | sed 's/^/  /')
} > "$carry/BUILD_INFO.txt"

# ---- 5. size: the tree travels too, under the same 64 MiB -------------------------------
carry_kib=$(du -sk "$carry" | cut -f1)
tree_kib=$(git ls-files -z -co --exclude-standard | xargs -0 du -skc 2>/dev/null | tail -1 | cut -f1)
total_mib=$(( (carry_kib + tree_kib + 1023) / 1024 ))
du -sh "$carry"/* "$carry/example"/* | sed 's/^/  /'
say ".gpu_carry $(du -sh "$carry" | cut -f1), working tree $((tree_kib / 1024)) MiB: ${total_mib} MiB of the tool's ${limit_mib}"
if [ "$total_mib" -ge "$limit_mib" ]; then say "error: too big to carry"; exit 1; fi
say "ready: run(command=\"bash bench/cuda/run_gpu_checks.sh\", carry=[\".gpu_carry\"], timeout_s=600)"
