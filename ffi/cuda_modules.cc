// The CUDA handler's modules (cuda_modules.h).

#include "cuda_modules.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <nanobind/nanobind.h>

#include "handlers.h"
#include "kernel_params.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace jaxptx::cu {

namespace {

// Kernel id -> image, and (id, context) -> loaded function. Modules are
// never unloaded: an id's code may run again until the process ends.
std::mutex g_mutex;
std::unordered_map<int64_t, std::shared_ptr<const Image>> g_images;
std::map<std::pair<int64_t, CUcontext>, Function> g_functions;

// Loads the image in the current context (the caller holds g_mutex).
ffi::Error load_function(const Driver& d, const Image& image, int64_t id, Function* out) {
  char log[8192] = {0};
  int options[] = {JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(log) - 1))};
  CUmodule module = nullptr;
  CUresult rc = d.cuModuleLoadDataEx(&module, image.data.data(), 2, options, values);
  if (rc != CUDA_SUCCESS) {
    return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": loading the module of kernel " + image.entry +
                                " (id " + std::to_string(id) + ") failed: " + describe(d, rc) +
                                (log[0] ? std::string("\n") + log : std::string()));
  }
  rc = d.cuModuleGetFunction(&out->fn, module, image.entry.c_str());
  if (rc != CUDA_SUCCESS) {
    return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": the module of kernel id " +
                                std::to_string(id) + " has no entry " + image.entry + ": " +
                                describe(d, rc));
  }
  std::string bad = jaxptx::kernel_param_bytes(
      d, out->fn, jaxptx::declared_param_count(image.ptx, image.entry), &out->param_bytes);
  if (!bad.empty()) {
    return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": kernel " + image.entry +
                                ": cannot read its parameters: " + bad);
  }
  return ffi::Error::Success();
}

// PTX text must be NUL-terminated for cuModuleLoadData; a cubin ignores it.
std::shared_ptr<const Image> make_image(std::string_view data, std::string_view entry,
                                        int64_t num_params, std::string_view ptx) {
  auto img = std::make_shared<Image>();
  img->data = std::string(data);
  if (img->data.empty() || img->data.back() != '\0') img->data.push_back('\0');
  img->entry = std::string(entry);
  img->num_params = num_params;
  img->ptx = std::string(ptx);
  return img;
}

}  // namespace

ffi::Error function_for(const Driver& d, const Image& image, int64_t id, CUcontext ctx,
                        Function* out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Function& f = g_functions[{id, ctx}];
  if (!f.fn) {
    if (ffi::Error e = load_function(d, image, id, &f); e.failure()) {
      g_functions.erase({id, ctx});
      return e;
    }
  }
  *out = f;
  return ffi::Error::Success();
}

ffi::Error opt_in_smem(const Driver& d, const Image& image, int64_t id, CUcontext ctx,
                       int64_t smem) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Function& f = g_functions[{id, ctx}];
  if (smem <= f.smem_opt_in) return ffi::Error::Success();
  CUresult rc = d.cuFuncSetAttribute(f.fn, FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(smem));
  if (rc != CUDA_SUCCESS) {
    return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": kernel " + image.entry + " cannot use " +
                                std::to_string(smem) + " bytes of dynamic shared memory: " +
                                describe(d, rc));
  }
  f.smem_opt_in = smem;
  return ffi::Error::Success();
}

std::shared_ptr<const Image> image_for(int64_t kernel_id, std::string_view ptx,
                                       std::string_view entry, int64_t num_params,
                                       std::string* error) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_images.find(kernel_id);
  if (it == g_images.end()) {
    return g_images.emplace(kernel_id, make_image(ptx, entry, num_params, ptx)).first->second;
  }
  if (it->second->ptx != ptx || it->second->entry != entry) {
    *error = JAXPTX_CUDA_TARGET ": kernel " + std::string(entry) + " (id " +
             std::to_string(kernel_id) + "): the module registered under this id was built "
             "from other PTX or another entry than the call carries";
    return nullptr;
  }
  return it->second;
}

}  // namespace jaxptx::cu

namespace jaxptx {

void cuda_register(int64_t kernel_id, const std::string& image, const std::string& ptx,
                   const std::string& entry, int64_t num_params) {
  if (image.empty()) throw nb::value_error("cuda_register: empty module image");
  if (num_params < 0) throw nb::value_error("cuda_register: num_params must be >= 0");
  std::shared_ptr<const cu::Image> img = cu::make_image(image, entry, num_params, ptx);
  std::lock_guard<std::mutex> lock(cu::g_mutex);
  auto [it, inserted] = cu::g_images.emplace(kernel_id, img);
  if (!inserted) {
    const cu::Image& old = *it->second;
    if (old.data != img->data || old.entry != entry || old.num_params != num_params ||
        old.ptx != ptx) {
      throw nb::value_error(("cuda_register: kernel id " + std::to_string(kernel_id) +
                             " is already registered with different content")
                                .c_str());
    }
  }
}

bool cuda_registered(int64_t kernel_id) {
  std::lock_guard<std::mutex> lock(cu::g_mutex);
  return cu::g_images.count(kernel_id) != 0;
}

}  // namespace jaxptx
