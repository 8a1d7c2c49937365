#!/bin/bash
# Builds tests/llm/cuda_check.cc with raio's LLM sources against a libtorch and runs it.
# Not part of the CMake build. Usage (from the repository root):
#   tests/llm/cuda_check.sh [DEVICE]
# Environment: TORCH_INC / TORCH_LIB (default: pip torch's include/ and lib/ from python3),
# DEPS (absl and nlohmann headers under $DEPS/include, libabsl_*.so.* under $DEPS/lib;
# default: none, i.e. the system's), OBJ (build folder, default /tmp/raio-cuda-check), JOBS,
# CXX (g++), WERROR (set: -Werror).
set -eo pipefail
DEV=${1:-cuda:0}
if [ -z "$TORCH_INC" ]; then
  T=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
  TORCH_INC="-isystem $T/include -isystem $T/include/torch/csrc/api/include"
  TORCH_LIB=$T/lib
fi
OBJ=${OBJ:-/tmp/raio-cuda-check}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OBJ"
INC="-Isrc -Iinclude -Itests/llm $TORCH_INC"
ABSL_LIBS="-labsl_status -labsl_statusor -labsl_strings -labsl_synchronization"
if [ -n "$DEPS" ]; then
  INC="$INC -isystem $DEPS/include"
  ABSL_LIBS="$(ls "$PWD/$DEPS"/lib/libabsl_*.so.*)"
  export LD_LIBRARY_PATH="$PWD/$DEPS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
FLAGS=(-std=c++20 -fPIC -Wall -Wextra ${WERROR:+-Werror} $INC
  -DRAIO_SENTENCEPIECE_SHIM_NAME='"libraio_sentencepiece_shim.so"'
  -DRAIO_SENTENCEPIECE_SHIM_PATH='"/nonexistent/libraio_sentencepiece_shim.so"')
SRCS="model_config weights llama2c_checkpoint safetensors hf_checkpoint tokenizer
  sentencepiece_model llama2c_tokenizer model_dir model paged_attention block_pool sampling
  scheduler metrics engine engine_output"
t0=$(date +%s)
pids=()
for f in $(for s in $SRCS; do echo src/raio/llm/$s.cc; done) tests/llm/cuda_check.cc; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
  o=-O2; [[ $f == *paged_attention* ]] && o=-O3
  ${CXX:-g++} "${FLAGS[@]}" $o -c "$f" -o "$OBJ/$(basename "$f" .cc).o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
# --no-as-needed: libtorch_cuda registers CUDA at load time; nothing references it
# directly, so --as-needed (Ubuntu's default) would drop it and CUDA would look absent.
CUDA_LIBS=""
[ -e "$TORCH_LIB/libtorch_cuda.so" ] && CUDA_LIBS="-ltorch_cuda -lc10_cuda"
${CXX:-g++} -o "$OBJ/cuda_check" "$OBJ"/*.o -L"$TORCH_LIB" -Wl,--no-as-needed $CUDA_LIBS -ltorch_cpu \
  -ltorch -lc10 -Wl,--as-needed $ABSL_LIBS -Wl,-rpath,"$TORCH_LIB" -Wl,--allow-shlib-undefined \
  -lpthread -ldl
echo "built in $(( $(date +%s) - t0 )) s"
"$OBJ/cuda_check" models/stories260K "$DEV"
