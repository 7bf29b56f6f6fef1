// A kernel's parameters from the driver, and the call's check (kernel_params.h).

#include "kernel_params.h"

namespace jaxptx {

namespace {

// A kernel's parameters fill at most 32764 bytes (CUDA 12.1+), so no kernel
// has more parameters than that: a driver answering past it is broken.
constexpr size_t kMaxParams = 32764;

}  // namespace

std::string kernel_param_bytes(const cu::Driver& d, cu::CUfunction fn,
                               std::vector<int64_t>* out) {
  out->clear();
  for (size_t index = 0; index <= kMaxParams; ++index) {
    size_t offset = 0, size = 0;
    cu::CUresult rc = d.cuFuncGetParamInfo(fn, index, &offset, &size);
    if (rc == cu::CUDA_ERROR_INVALID_VALUE) return std::string();  // past the last one
    if (rc != cu::CUDA_SUCCESS) {
      out->clear();
      return "cuFuncGetParamInfo failed for parameter " + std::to_string(index) + ": " +
             cu::describe(d, rc);
    }
    out->push_back(static_cast<int64_t>(size));
  }
  out->clear();
  return "cuFuncGetParamInfo reported more than " + std::to_string(kMaxParams) +
         " parameters (a kernel's parameters fill at most 32764 bytes)";
}

std::string check_params(const std::vector<int64_t>& declared, size_t n_buffers,
                         const int64_t* scalars, size_t n_scalars, size_t n_maps) {
  constexpr int64_t kPointer = 8, kTensorMap = 128;
  const std::vector<int64_t>& p = declared;
  if (p.size() != n_buffers + n_scalars + n_maps) {
    return "it declares " + std::to_string(p.size()) + " parameters, but the call passes " +
           std::to_string(n_buffers) + " buffer pointers, " + std::to_string(n_scalars) +
           " raw scalars and " + std::to_string(n_maps) + " TMA descriptors (" +
           std::to_string(n_buffers + n_scalars + n_maps) +
           "): the call does not match its kernel";
  }
  auto mismatch = [&](size_t k, const std::string& what, int64_t bytes) {
    return "parameter " + std::to_string(k) + " is " + std::to_string(p[k]) +
           " bytes in the kernel, but the call passes " + what + " there (" +
           std::to_string(bytes) + " bytes)";
  };
  for (size_t i = 0; i < n_buffers; ++i) {
    if (p[i] != kPointer) return mismatch(i, "buffer pointer " + std::to_string(i), kPointer);
  }
  for (size_t j = 0; j < n_scalars; ++j) {
    int64_t bytes = scalars[2 * j];
    if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) {
      return "raw scalar " + std::to_string(j) + " has " + std::to_string(bytes) +
             " bytes; a raw scalar has 1, 2, 4 or 8";
    }
    if (p[n_buffers + j] != bytes) {
      return mismatch(n_buffers + j, "raw scalar " + std::to_string(j), bytes);
    }
  }
  for (size_t t = 0; t < n_maps; ++t) {
    size_t k = n_buffers + n_scalars + t;
    if (p[k] != kTensorMap) return mismatch(k, "TMA descriptor " + std::to_string(t), kTensorMap);
  }
  return std::string();
}

}  // namespace jaxptx
