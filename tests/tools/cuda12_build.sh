#!/usr/bin/env bash
# Builds fsdptrain against a CUDA 12 toolkit, the way a cluster whose driver
# is older than R580 (R525-R575: CUDA 12) and cannot run CUDA 13 programs would.
#
#   bash tests/tools/cuda12_build.sh 12.0|12.4 [WORK_DIR]
#
# No CUDA 12 is installed here, so the script assembles one in WORK_DIR
# (default /tmp/fsdp-cuda12-VERSION) from what the registries carry:
#  - the compiler (nvcc, cicc, ptxas, fatbinary, nvlink, cudafe++): from the
#    distributions' own CUDA packaging, Ubuntu 24.04's nvidia-cuda-toolkit for
#    12.0.1 and Debian 13's for 12.4.1. PyPI's nvidia-cuda-nvcc-cu12 wheels
#    hold only ptxas and libnvvm (every 12.x release), not nvcc itself. The
#    .deb is unpacked, not installed, and checked against its pinned SHA256;
#  - headers and libraries from PyPI's cu12 wheels at the same CUDA release:
#    runtime, CCCL, NVRTC, cuBLAS(Lt) and crt headers; cuDNN 9.19 and NCCL
#    2.28.9, the versions the GPU machines run, kept in their own prefixes as
#    a cluster's modules keep them (found through CUDNN_HOME and NCCL_HOME).
#    The cuDNN frontend's headers come from the project's .venv, as for any
#    CUDA build (tools/setup.sh).
# It then builds every target through tools/build.sh with that nvcc, checks
# that the program links the CUDA 12 libraries and carries sm_90a code, that
# NCCL 2.18 is the oldest the sources take, and that the CUDA 12 build's CPU
# demo prints the main build's losses. Nothing runs on a GPU: this proves
# the build, not the kernels. About 8 minutes a release on 2 cores, and
# 2.2 GB of downloads (cuDNN and cuBLAS are most of it), so not part of CI;
# its log: bench/results/cuda12_build_cpu_*.txt.
set -euo pipefail

version=${1:?usage: cuda12_build.sh 12.0|12.4 [WORK_DIR]}
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${2:-/tmp/fsdp-cuda12-$version}

# Each release: its toolkit package (URL and SHA256), and for 12.0 the CCCL
# headers of the same release (libcu++ 1.9.0, CUB and Thrust 2.0.1) from
# Ubuntu's own packages, as Ubuntu's CUDA 12.0 uses them: PyPI's 12.0 CCCL
# wheels lack libcu++'s cuda/std headers.
ubuntu=http://archive.ubuntu.com/ubuntu/pool
case "$version" in
  12.0)
    debs=("$ubuntu/multiverse/n/nvidia-cuda-toolkit/nvidia-cuda-toolkit_12.0.140~12.0.1-4build4_amd64.deb ee91ed0262cd2c66a24453d53d3bcfe60825abdd6536de997cd8fd8d4f50b483"
          "$ubuntu/universe/libc/libcudacxx/libcu++-dev_1.9.0-3_all.deb cbc4abc2b4515705379bee50728eb39941e4a4599a2a8b6e25bfb2fddfd76920"
          "$ubuntu/universe/c/cub/libcub-dev_2.0.1-2_all.deb 9735635b969895e2a7c28d26865ddccfc36c89edaab5e3983ca20da191d0966b"
          "$ubuntu/universe/libt/libthrust/libthrust-dev_2.0.1-2_all.deb f6c8d791e669c23bbba75d8c0a2cceb551202e7ff0c2ca3ca6909e748aea66cf")
    wheels=(nvidia-cuda-nvcc-cu12==12.0.140 nvidia-cuda-runtime-cu12==12.0.146
            nvidia-cuda-nvrtc-cu12==12.0.140 nvidia-cublas-cu12==12.0.2.224) ;;
  12.4)
    debs=("http://deb.debian.org/debian/pool/non-free/n/nvidia-cuda-toolkit/nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319")
    wheels=(nvidia-cuda-nvcc-cu12==12.4.131 nvidia-cuda-runtime-cu12==12.4.127
            nvidia-cuda-cccl-cu12==12.4.127.post1 nvidia-cuda-nvrtc-cu12==12.4.127
            nvidia-cublas-cu12==12.4.5.8) ;;
  *) echo "cuda12_build: error: version '$version' unknown; give 12.0 or 12.4" >&2; exit 2 ;;
esac
cudnn_wheel=nvidia-cudnn-cu12==9.19.0.56
nccl_wheel=nvidia-nccl-cu12==2.28.9

step() { printf '\n== %s\n' "$*"; }
# Nothing of another toolkit may leak in: this machine's CUDA 13 is named by
# PATH, CUDA_HOME and LIBRARY_PATH (its stubs).
unset CUDA_HOME CUDA_PATH CUDA_ROOT CUDAToolkit_ROOT LIBRARY_PATH CPATH
PATH=$(tr ':' '\n' <<<"$PATH" | grep -v cuda | paste -sd:)
mkdir -p "$work"
cd "$work"

rm -rf deb && mkdir deb
for entry in "${debs[@]}"; do
  read -r url sha <<<"$entry"
  step "package: $url"
  deb=$(basename "$url")
  if [ ! -f "$deb" ]; then
    curl -fsS -o "$deb.part" "$url"
    mv "$deb.part" "$deb"
  fi
  echo "$sha  $deb" | sha256sum -c -
  dpkg-deb -x "$deb" deb
done

step "PyPI wheels: ${wheels[*]} $cudnn_wheel $nccl_wheel"
rm -rf venv && python3 -m venv venv
venv/bin/pip install -q --no-deps "${wheels[@]}" "$cudnn_wheel" "$nccl_wheel"
site=$(venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
venv/bin/pip list 2>/dev/null | grep -i nvidia

# A CUDA root laid out as NVIDIA's installer lays /usr/local/cuda-12.x out,
# made of links into the unpacked package and the wheels.
step "CUDA root: $work/cuda"
root=$work/cuda
rm -rf "$root" && mkdir -p "$root/bin/crt" "$root/nvvm/bin" "$root/include" "$root/lib64"
tk=$work/deb/usr/lib/nvidia-cuda-toolkit
ln -s "$tk/bin/nvcc" "$root/bin/nvcc"
for tool in ptxas fatbinary nvlink cudafe++ bin2c nvprune cuobjdump nvdisasm; do
  ln -s "$work/deb/usr/bin/$tool" "$root/bin/$tool"
done
ln -s "$tk"/bin/crt/* "$root/bin/crt/"
ln -s "$tk/bin/cicc" "$root/nvvm/bin/cicc"
ln -s "$tk/libdevice" "$root/nvvm/libdevice"
# The package's own profile names /usr paths; this one names the root.
cat > "$root/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
# Headers: the wheels' include folders and the packages' /usr/include, merged
# file by file (cp -s links each file; a name two of them hold fails).
for inc in "$site"/nvidia/{cuda_runtime,cuda_nvcc,cuda_cccl,cuda_nvrtc,cublas}/include "$work/deb/usr/include"; do
  [ -d "$inc" ] || continue
  for f in "$inc"/*; do
    case "$(basename "$f")" in __init__.py | __pycache__) continue ;; esac
    cp -rs "$f" "$root/include/"
  done
done
for pkg in cuda_runtime cuda_nvrtc cublas; do
  for f in "$site/nvidia/$pkg/lib"/*.so*; do
    [ -e "$f" ] || continue
    ln -s "$f" "$root/lib64/"
    # the development links a toolkit has: libcudart.so -> libcudart.so.12
    base=$(basename "$f")
    ln -sf "$base" "$root/lib64/${base%%.so*}.so"
  done
done
# cuDNN and NCCL in their own prefixes, as a cluster's modules keep them.
for pkg in cudnn nccl; do
  for f in "$site/nvidia/$pkg/lib"/lib*.so.*; do
    base=$(basename "$f")
    ln -sf "$base" "$site/nvidia/$pkg/lib/${base%%.so*}.so"
  done
done
export CUDNN_HOME=$site/nvidia/cudnn NCCL_HOME=$site/nvidia/nccl
export LD_LIBRARY_PATH=$root/lib64:$CUDNN_HOME/lib:$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$root/bin/nvcc" --version | tail -2

# Through tools/build.sh, as a user builds: nvcc named by CUDACXX (a cluster's
# `module load cuda/12.x` puts it on PATH instead), cuDNN and NCCL by
# CUDNN_HOME and NCCL_HOME. PyPI's runtime wheel has no libcudart_static.a,
# so the program links the shared runtime, as torch's CUDA 12 wheels do;
# CMake's compiler probe still links the static one, and reports "Detecting
# CUDA compiler ABI info - failed" here (harmless: the targets link shared).
step "tools/build.sh test (every target)"
build=$work/build
rm -rf "$build"
start=$(date +%s)
CUDACXX=$root/bin/nvcc BUILD_DIR=$build \
  CMAKE_ARGS="-DCUDAToolkit_ROOT=$root -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared -DCMAKE_CUDA_FLAGS=-cudart=shared" \
  bash "$repo/tools/build.sh" test > "$work/build.log" 2>&1 || { tail -60 "$work/build.log"; exit 1; }
grep -E "CUDA compiler identification|Found CUDAToolkit|cuDNN:|cudnn-frontend:" "$build/configure.log"
echo "built $(grep -c '^\[' "$work/build.log") steps in $(( $(date +%s) - start )) s"
grep -q "NVIDIA $version" "$build/configure.log" || { echo "cuda12_build: error: not configured with CUDA $version" >&2; exit 1; }

step "what fsdptrain links, and its device code"
# One ldd into a variable: `ldd | grep -q` under pipefail fails whenever grep
# stops reading first.
links=$(ldd "$build/src/fsdptrain")
grep -E "cudart|cublas|cudnn|nccl|nvrtc" <<<"$links" | sed "s|$work|WORK|"
"$root/bin/cuobjdump" --list-elf "$build/src/fsdptrain" | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/' | sort | uniq -c
for lib in cudart.so.12 cublasLt.so.12 cudnn.so.9 nccl.so.2; do
  grep -q "lib$lib => $work/" <<<"$links" ||
    { echo "cuda12_build: error: fsdptrain does not link lib$lib from $work" >&2; exit 1; }
done
if grep -E "libcudart.so.13|libcublasLt.so.13|/usr/local/cuda" <<<"$links"; then
  echo "cuda12_build: error: the CUDA 12 build links a CUDA 13 library" >&2; exit 1
fi

# The oldest NCCL: the process groups need ncclCommSplit (2.18); an older
# nccl.h must stop the build with comm/nccl_check.h's line, not a later one.
step "the oldest NCCL: comm's NCCL sources against 2.18.3, and 2.17.1 refused"
for v in 2.18.3 2.17.1; do
  rm -rf "nccl-$v" && mkdir "nccl-$v"
  venv/bin/pip download -q --no-deps -d "nccl-$v" "nvidia-nccl-cu12==$v"
  (cd "nccl-$v" && python3 -m zipfile -e ./*.whl .)
  out=$(for f in nccl_communicator.cpp nccl_watchdog.cpp; do
    g++ -std=c++20 -fsyntax-only -I"$repo" -I"$work/nccl-$v/nvidia/nccl/include" -I"$root/include" \
      $(mpicc --showme:compile) -DFSDP_HAVE_NCCL=1 "$repo/comm/$f" 2>&1 | grep -m1 'error' || true
  done)
  case "$v:$out" in
    2.18.3:) echo "NCCL $v: compiles" ;;
    2.17.1:*"needs NCCL 2.18 or newer"*) echo "NCCL $v: refused: $(head -1 <<<"$out" | sed 's/.*#error //')" ;;
    *) echo "cuda12_build: error: NCCL $v gave: ${out:-no error}" >&2; exit 1 ;;
  esac
done

# The CPU path is compiled by the same g++ either way, so the CUDA 12
# build's demo must print the main build's losses digit for digit (on one
# machine: OpenBLAS picks its kernels by CPU).
step "the CPU demo's fingerprint, CUDA 12 build against the main build"
bash "$repo/tools/make_example.sh" "$build/example" >/dev/null
ours=$(BUILD_DIR=$build bash "$repo/tools/demo_fingerprint.sh")
echo "$ours"
if [ -x "$repo/build/src/fsdptrain" ]; then
  bash "$repo/tools/make_example.sh" "$repo/build/example" >/dev/null
  main=$(bash "$repo/tools/demo_fingerprint.sh")
  [ "$ours" = "$main" ] || { echo "cuda12_build: error: the main build's fingerprint differs:"; echo "$main"; exit 1; } >&2
  echo "the same as the main build ($repo/build)"
else
  echo "skipped the comparison: no main build at $repo/build"
fi
echo "cuda12_build: CUDA $version build passed"
