#!/usr/bin/env bash
# aliasfuzz's device check: the one command of the device package (`make device-package` writes
# it to dist/device/run.sh beside the CUDA probes, the wheels and the cases).
#
#   ./run.sh [OUT]     OUT: the folder it writes (default ./device-check-<date>-<time>)
#
# Needs python3 with PyTorch (with CUDA), Hypothesis and numpy; no network and no Rust. PYTHON
# picks another interpreter, BUDGET the campaign's length (default 3m). In order, inside 10 minutes:
#   1. `aliasfuzz targets`: what this machine offers (targets.txt);
#   2. the seed's p11 cases on every CUDA target and on burn:wgpu, beside the CPU targets
#      (p11.txt): does candle's copy() share on CUDA as it does on Metal?
#   3. a campaign on torch:cuda, candle:cuda, burn:wgpu and the CPU targets (campaign/).
# burn runs on the GPU through Vulkan (burn:wgpu), not CUDA: docs/DEVICES.md says why.
# Without CUDA (no NVIDIA driver, or PyTorch without CUDA) it says so, and runs the same steps on
# the targets that remain. Exit status: 0 when every step ran (a campaign's new findings
# included), 2 when the machine lacks what the package needs, 3 when a step failed.
set -u

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$PWD/device-check-$(date +%Y%m%d-%H%M%S)}
budget=${BUDGET:-3m}
python=${PYTHON:-python3}
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
summary=$out/summary.txt
: >"$summary"

say() { echo "device check: $*" | tee -a "$summary"; }
fail() { say "$1"; exit "${2:-3}"; }

command -v "$python" >/dev/null || fail "$python: not found (PYTHON=... names the interpreter with PyTorch)" 2
"$python" -c 'import torch, hypothesis, numpy' 2>"$out/imports.err" ||
    fail "$python lacks PyTorch, Hypothesis or numpy: $(tail -1 "$out/imports.err")" 2

# aliasfuzz and the pure-Python packages the machine may lack, from the package's own wheels.
"$python" -m pip install --quiet --no-index --no-deps --no-compile --target "$out/site" "$here"/wheels/*.whl ||
    fail "pip could not install $here/wheels into $out/site" 2
export PYTHONPATH="$out/site${PYTHONPATH:+:$PYTHONPATH}"
# The probes travel gzipped (candle's CUDA kernels are PTX text); they run from OUT/bin.
"$python" - "$here/bin" "$out/bin" <<'UNPACK' || fail "the probes in $here/bin could not be unpacked into $out/bin" 2
import gzip, os, pathlib, shutil, sys
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
dst.mkdir(parents=True, exist_ok=True)
for packed in sorted(src.glob("*.gz")):
    binary = dst / packed.stem
    with gzip.open(packed, "rb") as i, open(binary, "wb") as o:
        shutil.copyfileobj(i, o)
    os.chmod(binary, 0o755)
UNPACK
export ALIASFUZZ_PROBE_DIR="$out/bin"
# candle's probe links the CUDA libraries of PyTorch's NVIDIA wheels (cuBLAS, cuRAND, NVRTC, the runtime).
nvidia_libs=$("$python" -c 'import nvidia, pathlib; print(":".join(str(p) for b in nvidia.__path__ for p in sorted(pathlib.Path(b).glob("*/lib"))))' 2>/dev/null)
export LD_LIBRARY_PATH="${nvidia_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
aliasfuzz() { "$python" -m harness.cli "$@"; }

# burn's probe runs burn's GPU backend on Vulkan (burn:wgpu): the package carries Debian's Vulkan
# loader for a machine without one, and NVIDIA's driver may keep its ICD file outside the
# loader's search path (/usr/local/nvidia in containers).
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$here/lib"
fi
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -f "$nvidia_icd" ] &&
    ! ls /etc/vulkan/icd.d/nvidia* /usr/share/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
    export VK_DRIVER_FILES=$nvidia_icd
fi

say "package: $here ($(grep -o '"compute_cap": "[0-9a-z]*"' "$here/MANIFEST.json" 2>/dev/null || echo 'no manifest'))"
say "python: $("$python" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')"
if ! driver=$("$python" -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>&1); then
    say "CUDA absent: no NVIDIA driver here (libcuda.so.1 does not load: ${driver##*: }); the CUDA targets are not run."
elif ! "$python" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    say "CUDA absent: the driver loads but PyTorch sees no CUDA device (torch $("$python" -c 'import torch; print(torch.__version__)'))."
else
    say "CUDA: $("$python" -c 'import torch; print(torch.cuda.get_device_name(0), "compute capability", "%d.%d" % torch.cuda.get_device_capability(0))')"
fi

# 1. The targets.
aliasfuzz targets | tee "$out/targets.txt" || fail "aliasfuzz targets failed"
aliasfuzz targets --json >"$out/targets.json" || fail "aliasfuzz targets --json failed"
# A probe that does not start says why: candle's CUDA probe, for one, needs the driver's library.
"$python" -c 'import json, sys; [print(f"not available: {fw}: {why}") for fw, why in json.load(open(sys.argv[1]))["unavailable"].items()]' "$out/targets.json" |
    while IFS= read -r line; do say "$line"; done
# The target lists the steps use, one per line: CUDA, burn:wgpu, the CPU references, every plain target.
{ read -r cuda_targets; read -r wgpu_target; read -r cpu_targets; read -r all; } < <("$python" - "$out/targets.json" <<'LISTS'
import json, sys
ids = [t["id"] for t in json.load(open(sys.argv[1]))["targets"]]
for wanted in (lambda i: i.split(":")[1] == "cuda", lambda i: i == "burn:wgpu",
               lambda i: i in ("torch:cpu", "candle:cpu", "burn:flex"), lambda i: "+" not in i):
    print(",".join(i for i in ids if wanted(i)))
LISTS
)
if [ -n "$cuda_targets" ]; then
    say "CUDA targets: $cuda_targets"
else
    say "CUDA targets: none; the p11 cases and the campaign run on the other targets alone."
fi
say "burn's GPU backend on Vulkan: ${wgpu_target:-absent (no Vulkan driver answered: see targets.txt)}"
targets=$cpu_targets${cuda_targets:+,$cuda_targets}${wgpu_target:+,$wgpu_target}
[ -n "$targets" ] || fail "no target to run (see $out/targets.txt)" 2

# 2. The seed's p11 cases: exit status 1 means a divergence, which is what the table is for.
status=0
COLUMNS=${COLUMNS:-200} aliasfuzz repro "$here"/cases/*.toml --targets "$targets" >"$out/p11.txt" 2>&1 || status=$?
cat "$out/p11.txt"
[ "$status" -le 1 ] || fail "the p11 cases failed (status $status): see $out/p11.txt"
say "p11 cases on $targets: $out/p11.txt"

# 3. The campaign, on the device-kind targets and the CPU ones (burn:ndarray too, where it is).
status=0
aliasfuzz fuzz --budget "$budget" --targets "$all" --out "$out/campaign" || status=$?
[ "$status" -le 1 ] || fail "the campaign failed (status $status): see $out/campaign"
say "campaign on $all: $out/campaign/report.md"
say "done: $out"
