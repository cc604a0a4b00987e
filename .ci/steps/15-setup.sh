#!/usr/bin/env bash
# Installs what the PyTorch trainer's tests need on a fresh Debian machine:
# torch and numpy from Debian (no pip registry is assumed).
set -euo pipefail
if /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
  exit 0
fi
for i in 1 2 3 4 5; do
  if timeout 900 apt-get install -y --no-install-recommends python3-torch python3-numpy libopenblas0-pthread; then
    exit 0
  fi
  sleep 10  # the dpkg lock may be held by another installer
done
exit 1
