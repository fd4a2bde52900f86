#!/usr/bin/env bash
# Installs what fsdptrain needs on a fresh Debian 12 machine (run as root).
# Idempotent: every step checks first, so a second run takes seconds.
set -euo pipefail

debs=(build-essential cmake ninja-build pkg-config
      openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools
      libboost-program-options-dev libgtest-dev libgmock-dev libopenblas-dev
      bible-kjv-text bible-kjv
      slurmctld slurmd slurm-client munge)  # tests/slurm runs a Slurm cluster on this machine
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

py=${PYTHON:-python3}
# numpy/h5py/tokenizers for tools/; pyarrow (Parquet), tiktoken and zstandard (.zst)
# for tools/prepare_data.py; matplotlib for tools/plot_metrics.py; safetensors for
# export; cudnn-frontend headers only.
pips=(numpy h5py tokenizers safetensors pyarrow tiktoken zstandard matplotlib)
need=()
for m in "${pips[@]}"; do "$py" -c "import $m" 2>/dev/null || need+=("$m"); done
((${#need[@]})) && "$py" -m pip install -q "${need[@]}"
# The wheel puts cudnn_frontend.h under <site-packages>/include; CMake asks python for it.
fe_inc=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'] + '/include')")
if [ ! -f "$fe_inc/cudnn_frontend.h" ]; then
  "$py" -m pip install -q --no-deps nvidia-cudnn-frontend
fi
echo "setup: ok"
