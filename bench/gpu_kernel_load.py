"""TensorFlow's own GPU kernels on a Hopper card: native SASS or PTX compiled by the driver?

    uv run python -m bench.gpu_kernel_load extract --out .devrun/kernels  # here (needs cuobjdump)
    python3 -m bench.gpu_kernel_load load .devrun/kernels --out load.jsonl  # on the GPU machine

Why it exists: an H100 (sm_90) runs a kernel from the library's SASS for sm_90 if the fat binary
has it; otherwise the driver compiles the kernel's PTX at load time (minutes for a library of
TensorFlow's size, cached in ``CUDA_CACHE_PATH`` up to ``CUDA_CACHE_MAXSIZE``). The GPU machines
lent to this project have no TensorFlow (3 GB with its CUDA libraries; a call carries 64 MiB), so
``extract`` takes the kernels out of the locked TensorFlow's ``libtensorflow_cc.so.2`` here with
``cuobjdump`` (on PATH, or from the ``nvidia-cuda-cuobjdump`` wheel: ``--cuobjdump``) and packs
the ``sm_90`` cubins and the PTX into two zstd tar files; ``load`` unpacks them on the GPU machine
and loads each through the CUDA driver API (``cuModuleLoadData``, ctypes, no framework): every
cubin, then the PTX in file order for ``--ptx-seconds`` with a fresh JIT cache (cold), then the
same PTX modules again (warm). One JSON line per phase. Results: docs/benchmarks.md, "GPU".

``load`` needs the ``zstandard`` package on the GPU machine (carry its cp312 wheel) and nothing
else of this project.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

LIBRARY = "libtensorflow_cc.so.2"
PACKS = {"cubin": "*.sm_90.cubin", "ptx": "*.ptx"}


def extract(out: str, cuobjdump: str) -> None:
    """Packs the locked TensorFlow's sm_90 cubins and PTX into ``out/{cubin,ptx}.tar.zst``."""
    import tensorflow as tf  # noqa: PLC0415 (only here: ``load`` runs where TF is missing)

    library = os.path.join(os.path.dirname(tf.__file__), LIBRARY)
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [cuobjdump, "-xelf", "all", "-xptx", "all", library],
            cwd=tmp,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for pack, pattern in PACKS.items():
            names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(tmp, pattern)))
            target = os.path.join(out, f"{pack}.tar.zst")
            tar = subprocess.Popen(["tar", "cf", "-", *names], cwd=tmp, stdout=subprocess.PIPE)
            with open(target, "wb") as f:
                subprocess.run(["zstd", "-19", "-T0", "-q", "-c"], stdin=tar.stdout, stdout=f)
            tar.wait()
            size = os.path.getsize(target) / 1e6
            print(f"{target}: {len(names)} files ({pack}), {size:.1f} MB, TF {tf.__version__}")


def _module_order(path: str) -> int:
    return int(os.path.basename(path).split(".so.")[1].split(".")[0])


def _load_all(files: list[str], seconds: float, limit: int) -> dict:
    """Loads each file as a CUDA module (then unloads it) until ``seconds`` or ``limit``."""
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(rc: int, what: str) -> None:
        if rc:
            text = ctypes.c_char_p()
            cuda.cuGetErrorString(rc, ctypes.byref(text))
            raise RuntimeError(f"{what}: CUDA error {rc} {text.value}")

    check(cuda.cuInit(0), "cuInit")
    device, context, version = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    cuda.cuDriverGetVersion(ctypes.byref(version))
    times, failed, size = [], [], 0
    start = time.perf_counter()
    for path in files:
        if time.perf_counter() - start > seconds or len(times) >= limit:
            break
        with open(path, "rb") as f:
            data = f.read() + (b"\0" if path.endswith(".ptx") else b"")
        module, image = ctypes.c_void_p(), ctypes.create_string_buffer(data, len(data))
        began = time.perf_counter()
        rc = cuda.cuModuleLoadData(ctypes.byref(module), image)
        times.append(time.perf_counter() - began)
        if rc:
            failed.append([os.path.basename(path), rc])
            continue
        cuda.cuModuleUnload(module)
        size += len(data)
    times.sort()
    return {
        "driver_cuda_version": version.value,
        "modules": len(times),
        "of": len(files),
        "mb": round(size / 1e6, 1),
        "seconds": round(time.perf_counter() - start, 2),
        "median_ms": round(1000 * times[len(times) // 2], 2) if times else None,
        "max_ms": round(1000 * times[-1], 1) if times else None,
        "failed": failed,
    }


def _phase(folder: str, phase: str, seconds: float, limit: int, env: dict) -> dict:
    """One phase in a fresh process (the driver reads its JIT cache settings at start)."""
    code = (
        "import json, sys; from bench import gpu_kernel_load as g; "
        "print(json.dumps(g._phase_here(*sys.argv[1:])))"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where `bench` imports
    args = [sys.executable, "-c", code, folder, phase, str(seconds), str(limit)]
    out = subprocess.run(args, env={**os.environ, **env}, check=True, capture_output=True, cwd=root)
    return {"phase": phase, **json.loads(out.stdout), **env}


def _phase_here(folder: str, phase: str, seconds: str, limit: str) -> dict:
    pattern = PACKS["ptx" if phase.startswith("ptx") else "cubin"]
    files = sorted(glob.glob(os.path.join(folder, pattern)), key=_module_order)
    return _load_all(files, float(seconds), int(limit))


def load(packs: str, out: str, ptx_seconds: float) -> None:
    """Unpacks the kernels and times loading them: cubins, PTX cold, PTX warm (JSON lines)."""
    import zstandard  # noqa: PLC0415 (carried to the GPU machine as a wheel)

    work = tempfile.mkdtemp()
    for pack in PACKS:
        with open(os.path.join(packs, f"{pack}.tar.zst"), "rb") as f:
            with zstandard.ZstdDecompressor().stream_reader(f) as reader:
                tarfile.open(fileobj=reader, mode="r|").extractall(work, filter="data")
    cache = os.path.join(work, "jit-cache")
    jit = {"CUDA_CACHE_PATH": cache, "CUDA_CACHE_MAXSIZE": str(4 << 30)}
    rows = [_phase(work, "cubin", 600, 10**9, {})]
    rows.append(_phase(work, "ptx-cold", ptx_seconds, 10**9, jit))
    rows.append(_phase(work, "ptx-warm", 600, rows[-1]["modules"], jit))
    cache_mb = (
        sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs) / 1e6
    )
    rows[-1]["jit_cache_mb"] = round(cache_mb, 1)
    with open(out, "w") as f:
        for row in rows:
            print(json.dumps(row))
            f.write(json.dumps(row) + "\n")
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("extract", help="here: pack TF's sm_90 cubins and PTX")
    e.add_argument("--out", required=True)
    e.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    ld = sub.add_parser("load", help="on the GPU machine: time loading them")
    ld.add_argument("packs")
    ld.add_argument("--out", default="kernel-load.jsonl")
    ld.add_argument("--ptx-seconds", type=float, default=120.0)
    args = parser.parse_args()
    if args.command == "extract":
        extract(args.out, args.cuobjdump)
    else:
        load(args.packs, args.out, args.ptx_seconds)


if __name__ == "__main__":
    main()
