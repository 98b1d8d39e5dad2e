# Sourced by the slides tests (data_region.sh, slides_train.sh): skip (77)
# without the histology image that scripts/make_slides.py cuts, else set
# `src` to it and `py` to a python3 with numpy and Pillow (HYFI_PYTHON,
# HYFI_TORCH_PYTHON, python3, /usr/bin/python3: the first that has them).
src="${HYFI_DEPS:-/opt/hyfi-deps}/data/ihc.png"
[ -f "$src" ] || { echo "skip: no $src (bash scripts/setup.sh fetches it)"; exit 77; }
py=""
for p in "${HYFI_PYTHON:-}" "${HYFI_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$p" ] && "$p" -c 'import numpy, PIL' 2>/dev/null && { py=$p; break; }
done
[ -n "$py" ] || { echo "skip: no python3 with numpy and Pillow (python3-numpy, python3-pil)"; exit 77; }
