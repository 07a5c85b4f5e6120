export MINISGL_CACHE_DIR=$PWD/.cache PYTHONPATH=$PWD/python MINISGL_OFFLINE=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; python -c "import torch,transformers;print(torch.__version__, transformers.__version__)"
python benchmarks/gpu_kernels.py 2>&1 | grep -v Loading | tee $OUT/gpu_kernels.txt
nvcc -std=c++17 -O2 -arch=sm_90 -Ipython/minisgl/kernel/csrc tests/cuda/test_kv_kernels.cu -o /tmp/tkv && /tmp/tkv | tee $OUT/test_kv_kernels_gpu.txt
[ -z "${SKIP_CONFORMANCE:-}" ] && OUT=/tmp/conf bash tools/gpu_conformance.sh > $OUT/conformance_summary.txt 2>&1; tail -20 $OUT/conformance_summary.txt; tar czf $OUT/conformance.tgz -C /tmp conf
[ -n "${WITH_OFFLINE:-}" ] && python -m minisgl.benchmark.offline --model Qwen/Qwen3-0.6B --dummy-weight --compare-hf --num-requests 64 2>&1 | grep -v -E "Loading|generation_config" | tee $OUT/offline_bench_gpu.txt
# The H200 image lacks the serving packages: carry .cache/wheels (benchmarks/device_wheels.sh)
[ -n "${WITH_SERVING:-}" ] && bash benchmarks/device_prep.sh
[ -n "${WITH_SERVING:-}" ] && python benchmarks/serving.py --dummy-weight --clients 64 --max-tokens 128 2>&1 | grep -v -E "INFO|Loading" | tee $OUT/serving_gpu.txt
