"""第 19 章：用两个版本的 nvcc 编译 kernel 的自检程序，并在 CPU 模拟器上运行它。

Compiles tests/cuda/test_kv_kernels.cu with every CUDA toolkit that tools/check.py finds (nvcc on
PATH plus the one `python tools/check.py --install` puts into the cache), then runs the program on
the CPU emulator, which prints one PASS/FAIL line per kernel case. The torch extension ext.cu is
left to `python tools/check.py` (a minute or two per toolkit).
"""

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import check  # noqa: E402
import emu_kernels  # noqa: E402

began = time.perf_counter()
toolkits = check.find_toolkits()
compiled = True
for toolkit in toolkits:
    result = check.compile_source(toolkit, check.SELF_TEST)
    print(f"nvcc {toolkit.version}: 编译 {'通过' if result.ok else '失败'}")
    compiled = compiled and result.ok
if len(toolkits) < 2:
    print(f"只找到 {len(toolkits)} 个版本的 nvcc；运行 python tools/check.py --install 装上第二个")

print("CPU 模拟器上运行自检：", flush=True)
passed = emu_kernels.run(ROOT / check.SELF_TEST)
print("全部通过" if compiled and passed else "有失败")
print(f"took {time.perf_counter() - began:.1f} s")
sys.exit(0 if compiled and passed else 1)
