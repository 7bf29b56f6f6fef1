// A kernel's parameters as the driver reports them, and the check of a
// call's parameter list against them: cuLaunchKernelEx reads as many bytes
// through each parameter pointer as the kernel's parameter has, so a list
// that does not match the kernel would make the driver read past the
// handler's values. The sizes come from the loaded function
// (cuFuncGetParamInfo); only how many parameters to ask about is read from
// the PTX text, so that the handler never asks past the last one (an
// answered CUDA_ERROR_INVALID_VALUE is an API error compute-sanitizer
// reports against the user's program).

#ifndef JAXPTX_FFI_KERNEL_PARAMS_H_
#define JAXPTX_FFI_KERNEL_PARAMS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cuda_driver.h"

namespace jaxptx {

// How many parameters `.entry` `entry` of `ptx` declares (comments
// skipped), or -1 when the text has no such entry.
int64_t declared_param_count(std::string_view ptx, std::string_view entry);

// The size in bytes of each parameter of `fn`, in order, asked of the driver
// with cuFuncGetParamInfo for indices 0 .. count-1. With count < 0 (the
// count is not known) it asks from index 0 until the driver answers
// CUDA_ERROR_INVALID_VALUE (past the last parameter). Returns an empty
// string, or why the sizes cannot be read (the failing call's CUresult, or a
// driver that reports fewer parameters than `count`).
std::string kernel_param_bytes(const cu::Driver& d, cu::CUfunction fn, int64_t count,
                               std::vector<int64_t>* out);

// Checks a launch's parameter list against `declared` (kernel_param_bytes):
// `n_buffers` pointers (8 bytes each), then `n_scalars` raw scalars whose
// sizes are scalars[0], scalars[2], ... (the (bytes, bits) pairs of the
// call's scalars attribute; 1, 2, 4 or 8 bytes: the handler holds each value
// in an int64), then `n_maps` 128-byte TMA descriptors. Returns an empty
// string, or the mismatch.
std::string check_params(const std::vector<int64_t>& declared, size_t n_buffers,
                         const int64_t* scalars, size_t n_scalars, size_t n_maps);

}  // namespace jaxptx

#endif  // JAXPTX_FFI_KERNEL_PARAMS_H_
