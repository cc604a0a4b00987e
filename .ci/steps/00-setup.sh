#!/usr/bin/env bash
# Debian packages the tests need on a new machine: PyTorch and numpy for
# /usr/bin/python3 (the independent model reference, the PyTorch trainer,
# the kernel peer), OpenBLAS so torch and numpy are not on the reference
# BLAS, and curl for the end-to-end scripts.
set -euo pipefail
need=()
/usr/bin/python3 -c "import torch, numpy" >/dev/null 2>&1 || need+=(python3-torch python3-numpy)
dpkg -s libopenblas0-pthread >/dev/null 2>&1 || need+=(libopenblas0-pthread)
command -v curl >/dev/null 2>&1 || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  timeout 600 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${need[@]}" >/dev/null
fi
/usr/bin/python3 -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__)"
