# Environment for building and running hyfi against the StarPU that scripts/setup.sh built.
# Usage: source scripts/env.sh
HYFI_DEPS="${HYFI_DEPS:-/opt/hyfi-deps}"
export PKG_CONFIG_PATH="$HYFI_DEPS/starpu/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$HYFI_DEPS/starpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$HYFI_DEPS/starpu/bin:$PATH"
# StarPU's default silence when a calibration is missing; keep it quiet.
export STARPU_SILENT="${STARPU_SILENT:-1}"
# Python with PyTorch, torchvision and safetensors for the interoperability
# tests (scripts/setup.sh makes it), unless one is given.
if [ -z "${HYFI_TORCH_PYTHON:-}" ] && [ -x "$HYFI_DEPS/pyvenv/bin/python" ]; then
  export HYFI_TORCH_PYTHON="$HYFI_DEPS/pyvenv/bin/python"
fi
