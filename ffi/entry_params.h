// The parameters a PTX entry declares, read from its text: what the CUDA
// handler checks a launch's parameter list against before the driver copies
// anything (cuLaunchKernelEx reads as many bytes through each parameter
// pointer as the kernel's parameter has, so a list that does not match the
// kernel would make the driver read past the handler's values).

#ifndef JAXPTX_FFI_ENTRY_PARAMS_H_
#define JAXPTX_FFI_ENTRY_PARAMS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace jaxptx {

// The size in bytes of each `.param` of `.entry entry` in `ptx`, in order
// (`.param .u64 p` is 8, `.param .align 64 .b8 t[128]` is 128). Returns an
// empty string, or why the parameters cannot be read (no such entry, a
// declaration it does not understand).
std::string entry_param_bytes(std::string_view ptx, std::string_view entry,
                              std::vector<int64_t>* out);

// Checks a launch's parameter list against `declared` (entry_param_bytes):
// `n_buffers` pointers (8 bytes each), then `n_scalars` raw scalars whose
// sizes are scalars[0], scalars[2], ... (the (bytes, bits) pairs of the
// call's scalars attribute; 1, 2, 4 or 8 bytes: the handler holds each value
// in an int64), then `n_maps` 128-byte TMA descriptors. Returns an empty
// string, or the mismatch.
std::string check_params(const std::vector<int64_t>& declared, size_t n_buffers,
                         const int64_t* scalars, size_t n_scalars, size_t n_maps);

}  // namespace jaxptx

#endif  // JAXPTX_FFI_ENTRY_PARAMS_H_
