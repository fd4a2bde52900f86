#!/usr/bin/env bash
# Run HERE (the build machine) before a GPU session: copies what the GPU
# machine lacks into .gpu_carry/ (git-ignored), to be named in the device
# tool's `carry`: the cudnn-frontend headers and GoogleTest's source.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.gpu_carry/' .git/info/exclude 2>/dev/null || echo '/.gpu_carry/' >> .git/info/exclude
rm -rf .gpu_carry && mkdir -p .gpu_carry
fe=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'] + '/include')")
cp -r "$fe" .gpu_carry/cudnn_frontend_include
cp -r /usr/src/googletest .gpu_carry/googletest
du -sh .gpu_carry
