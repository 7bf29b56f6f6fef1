// The CUDA handler's modules: each kernel id's module image (registered from
// Python, or the PTX its first call carries) and, per CUDA context, the
// function loaded from it with its parameter sizes (cuFuncGetParamInfo) and
// its dynamic shared-memory opt-in. Modules are never unloaded: an id's code
// may run again until the process ends. Thread-safe.

#ifndef JAXPTX_FFI_CUDA_MODULES_H_
#define JAXPTX_FFI_CUDA_MODULES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cuda_driver.h"
#include "xla/ffi/api/ffi.h"

namespace jaxptx::cu {

// A kernel id's module image.
struct Image {
  std::string data;  // PTX text (NUL-terminated) or cubin bytes
  std::string entry;
  int64_t num_params;
  std::string ptx;   // the PTX the image was built from
};

// A kernel's function, loaded in one context.
struct Function {
  CUfunction fn = nullptr;
  int64_t smem_opt_in = DEFAULT_MAX_DYNAMIC_SMEM;
  std::vector<int64_t> param_bytes;  // each parameter's size (cuFuncGetParamInfo)
};

// The image registered under `kernel_id` (a verified call), registering the
// call's PTX first when there is none. A cubin registered for other PTX than
// the call's is an error (empty pointer, `error` set).
std::shared_ptr<const Image> image_for(int64_t kernel_id, std::string_view ptx,
                                       std::string_view entry, int64_t num_params,
                                       std::string* error);

// The function of kernel `id` in context `ctx` (which must be current),
// loaded there and its parameters read on its first use; `out` gets a copy.
xla::ffi::Error function_for(const Driver& d, const Image& image, int64_t id, CUcontext ctx,
                             Function* out);

// Opts the function of kernel `id` in context `ctx` (loaded by function_for)
// in to `smem` bytes of dynamic shared memory, once: the opt-in is kept.
xla::ffi::Error opt_in_smem(const Driver& d, const Image& image, int64_t id, CUcontext ctx,
                            int64_t smem);

}  // namespace jaxptx::cu

#endif  // JAXPTX_FFI_CUDA_MODULES_H_
