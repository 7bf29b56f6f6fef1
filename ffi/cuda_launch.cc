// jaxptx_launch_v2: the CUDA platform's FFI handler.
//
// Every call carries its kernel's PTX and entry name as attributes, so a
// deserialised export or a cached executable runs in a process that never
// lowered the kernel. Each call is first checked against its id, which is
// derived from that content (call_identity.h): an edited call is refused,
// never run as another kernel's code. The first call of an id registers its
// PTX, which the driver JIT-compiles; Python may register a cubin for the
// same PTX first (at lowering, from ptxas and the on-disk cache), and then
// that is loaded. Inputs the kernel may store into (the may_write_inputs
// attribute) and that no output aliases are copied to scratch memory first,
// so a JAX array is never changed in place behind XLA's back. At
// run time the handler loads the module once per CUDA context (the stream's),
// opts in to more than 48 KiB of dynamic shared memory when asked, and
// launches with cuLaunchKernelEx on XLA's stream, passing the device
// addresses of the inputs then the outputs as the kernel's parameters, then
// the values of its raw scalar params, then its TMA descriptors by value,
// encoded for this call from those addresses (tensor_maps.h).
// Before anything reaches the driver, the call's parameter list (buffer
// pointers, raw scalars, TMA descriptors) is checked against the parameters
// the kernel's PTX declares (entry_params.h): the driver copies as many
// bytes through each parameter pointer as the kernel's parameter has.
// libcuda.so.1 is opened with dlopen on first use, so the extension builds
// and imports with no driver; a stand-in driver may replace it
// (set_driver_override, standin.h: how CI runs this handler with no GPU).
// Every failure is returned as an ffi::Error.

#include <dlfcn.h>

#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "call_identity.h"
#include "cuda_driver.h"
#include "entry_params.h"
#include "handlers.h"
#include "launch_capture.h"
#include "standin.h"
#include "tensor_maps.h"


namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace jaxptx::cu {

namespace {

struct Loaded {
  Driver api{};
  std::string error;
};

template <typename F>
bool bind(void* lib, const char* name, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn && error.empty()) error = std::string("libcuda.so.1 has no symbol ") + name;
  return fn != nullptr;
}

Loaded open_driver() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    out.error = std::string("cannot open libcuda.so.1 (no NVIDIA driver?): ") + (why ? why : "");
    return out;
  }
  Driver& d = out.api;
  bind(lib, "cuInit", d.cuInit, out.error);
  bind(lib, "cuGetErrorName", d.cuGetErrorName, out.error);
  bind(lib, "cuGetErrorString", d.cuGetErrorString, out.error);
  bind(lib, "cuStreamGetCtx", d.cuStreamGetCtx, out.error);
  bind(lib, "cuCtxGetCurrent", d.cuCtxGetCurrent, out.error);
  bind(lib, "cuCtxPushCurrent_v2", d.cuCtxPushCurrent_v2, out.error);
  bind(lib, "cuCtxPopCurrent_v2", d.cuCtxPopCurrent_v2, out.error);
  bind(lib, "cuModuleLoadDataEx", d.cuModuleLoadDataEx, out.error);
  bind(lib, "cuModuleGetFunction", d.cuModuleGetFunction, out.error);
  bind(lib, "cuFuncSetAttribute", d.cuFuncSetAttribute, out.error);
  bind(lib, "cuLaunchKernelEx", d.cuLaunchKernelEx, out.error);
  bind(lib, "cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync_v2, out.error);
  bind(lib, "cuStreamSynchronize", d.cuStreamSynchronize, out.error);
  bind(lib, "cuMemcpyDtoH_v2", d.cuMemcpyDtoH_v2, out.error);
  // Optional: only kernels with TMA descriptors need it.
  d.cuTensorMapEncodeTiled =
      reinterpret_cast<decltype(d.cuTensorMapEncodeTiled)>(dlsym(lib, "cuTensorMapEncodeTiled"));
  if (out.error.empty()) {
    CUresult rc = d.cuInit(0);
    if (rc != CUDA_SUCCESS) out.error = "cuInit failed with CUresult " + std::to_string(rc);
  }
  return out;  // the library stays open for the life of the process
}

std::atomic<const Driver*> g_override{nullptr};

}  // namespace

void set_driver_override(const Driver* d) { g_override.store(d, std::memory_order_release); }

const Driver* driver(const char** error) {
  if (const Driver* d = g_override.load(std::memory_order_acquire)) return d;
  static const Loaded loaded = open_driver();  // thread-safe initialisation
  if (!loaded.error.empty()) {
    *error = loaded.error.c_str();
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace jaxptx::cu

namespace {

using namespace jaxptx::cu;

struct Image {
  std::string data;  // PTX text (NUL-terminated) or cubin bytes
  std::string entry;
  int64_t num_params;
  std::string ptx;   // the PTX the image was built from
  std::vector<int64_t> param_bytes;  // each .param of the entry, from the PTX
  std::string param_error;           // why param_bytes could not be read
};

struct Function {
  CUfunction fn = nullptr;
  int64_t smem_opt_in = DEFAULT_MAX_DYNAMIC_SMEM;
};

// Kernel id -> image, and (id, context) -> loaded function. Modules are
// never unloaded: an id's code may run again until the process ends.
std::mutex g_mutex;
std::unordered_map<int64_t, std::shared_ptr<const Image>> g_images;
std::map<std::pair<int64_t, CUcontext>, Function> g_functions;

std::string describe(const Driver& d, CUresult rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  d.cuGetErrorName(rc, &name);
  d.cuGetErrorString(rc, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(rc)) + " (" +
         (text ? text : "no description") + ")";
}

// Pushes a context for the scope of a launch.
class ScopedContext {
 public:
  ScopedContext(const Driver& d, CUcontext ctx) : d_(d) {
    rc_ = d_.cuCtxPushCurrent_v2(ctx);
  }
  ~ScopedContext() {
    CUcontext ignored;
    if (rc_ == CUDA_SUCCESS) d_.cuCtxPopCurrent_v2(&ignored);
  }
  CUresult rc() const { return rc_; }

 private:
  const Driver& d_;
  CUresult rc_;
};

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
  img->param_error = jaxptx::entry_param_bytes(ptx, entry, &img->param_bytes);
  return img;
}

// The image registered under `kernel_id` (a verified call), registering the
// call's PTX first when there is none. A cubin registered for other PTX than
// the call's is an error (empty pointer, `error` set).
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

// Copies the inputs the kernel may write (and no output aliases) to scratch
// memory on `stream`, pointing `pointers` at the copies.
ffi::Error privatise_inputs(const Driver& d, CUstream stream, ffi::RemainingArgs args,
                            ffi::RemainingRets rets, int64_t may_write_inputs,
                            ffi::ScratchAllocator& scratch, std::vector<void*>& pointers) {
  for (size_t i = 0; i < args.size(); ++i) {
    // The mask holds bits 0..62; inputs past them are always copied.
    if (i < 63 && !((may_write_inputs >> i) & 1)) continue;
    bool aliased = false;
    for (size_t j = 0; j < rets.size(); ++j) aliased |= pointers[args.size() + j] == pointers[i];
    size_t nbytes = args.get<ffi::AnyBuffer>(i)->size_bytes();
    if (aliased || nbytes == 0) continue;
    std::optional<void*> copy = scratch.Allocate(nbytes, 256);
    if (!copy.has_value()) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        JAXPTX_CUDA_TARGET ": no scratch memory for a private copy of input " +
                            std::to_string(i));
    }
    CUresult rc = d.cuMemcpyDtoDAsync_v2(reinterpret_cast<CUdeviceptr>(*copy),
                                         reinterpret_cast<CUdeviceptr>(pointers[i]), nbytes,
                                         stream);
    if (rc != CUDA_SUCCESS) {
      return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": copying input " + std::to_string(i) +
                                  " failed: " + describe(d, rc));
    }
    pointers[i] = *copy;
  }
  return ffi::Error::Success();
}

ffi::Error launch(CUstream stream, ffi::ScratchAllocator& scratch, ffi::RemainingArgs args,
                  ffi::RemainingRets rets, int64_t kernel_id, std::string_view ptx,
                  std::string_view entry, ffi::Dictionary launch_attr,
                  ffi::Span<const int64_t> scalars, ffi::Span<const int64_t> tma,
                  int64_t may_write_inputs) {
  std::vector<int64_t> in_bytes, out_bytes;
  for (size_t i = 0; i < args.size(); ++i) {
    auto buf = args.get<ffi::AnyBuffer>(i);
    if (!buf.has_value()) return buf.error();
    in_bytes.push_back(static_cast<int64_t>(buf->size_bytes()));
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto buf = rets.get<ffi::AnyBuffer>(i);
    if (!buf.has_value()) return buf.error();
    out_bytes.push_back(static_cast<int64_t>((*buf)->size_bytes()));
  }
  jaxptx::LaunchShape shape;
  std::string bad = jaxptx::check_call(jaxptx::kCudaTarget, kernel_id, ptx, entry, launch_attr, tma,
                                       in_bytes, out_bytes, &shape);
  if (!bad.empty()) return ffi::Error::InvalidArgument(bad);
  size_t n = args.size() + rets.size();
  if (scalars.size() % 2 != 0) {
    return ffi::Error::InvalidArgument(JAXPTX_CUDA_TARGET ": kernel " + std::string(entry) +
                                       ": the scalars attribute is not (bytes, bits) pairs");
  }
  std::vector<TiledMapArgs> records;
  bad = decode_tensor_maps(tma, n, &records);
  if (!bad.empty()) {
    return ffi::Error::InvalidArgument(JAXPTX_CUDA_TARGET ": kernel " + std::string(entry) + ": " +
                                       bad);
  }
  const char* why = nullptr;
  const Driver* d = driver(&why);
  if (!d) return ffi::Error::Internal(std::string(JAXPTX_CUDA_TARGET ": ") + why);
  std::shared_ptr<const Image> image = image_for(
      kernel_id, ptx, entry, static_cast<int64_t>(args.size() + rets.size()), &bad);
  if (!image) return ffi::Error::InvalidArgument(bad);
  if (static_cast<int64_t>(n) != image->num_params) {
    return ffi::Error::InvalidArgument(
        JAXPTX_CUDA_TARGET ": kernel " + image->entry + " takes " +
        std::to_string(image->num_params) + " pointer parameters, got " + std::to_string(n) +
        " buffers");
  }
  bad = image->param_error.empty()
            ? jaxptx::check_params(image->param_bytes, n, scalars.begin(), scalars.size() / 2,
                                   records.size())
            : "cannot read its parameters from its PTX: " + image->param_error;
  if (!bad.empty()) {
    return ffi::Error::InvalidArgument(JAXPTX_CUDA_TARGET ": kernel " + image->entry + ": " + bad);
  }
  std::vector<void*> pointers(n);
  for (size_t i = 0; i < args.size(); ++i) {
    auto buf = args.get<ffi::AnyBuffer>(i);
    if (!buf.has_value()) return buf.error();
    pointers[i] = buf->untyped_data();
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto buf = rets.get<ffi::AnyBuffer>(i);
    if (!buf.has_value()) return buf.error();
    pointers[args.size() + i] = (*buf)->untyped_data();
  }
  CUcontext ctx = nullptr;
  CUresult stream_rc = d->cuStreamGetCtx(stream, &ctx);
  CUresult rc = stream_rc;
  if (rc != CUDA_SUCCESS || !ctx) rc = d->cuCtxGetCurrent(&ctx);
  if (rc != CUDA_SUCCESS || !ctx) {
    return ffi::Error::Internal(
        JAXPTX_CUDA_TARGET ": no CUDA context for XLA's stream: cuStreamGetCtx gave " +
        (stream_rc != CUDA_SUCCESS ? describe(*d, stream_rc) : std::string("no context")) +
        ", and " + (rc != CUDA_SUCCESS ? "cuCtxGetCurrent failed: " + describe(*d, rc)
                                       : std::string("no context is current")));
  }
  ScopedContext scope(*d, ctx);
  if (scope.rc() != CUDA_SUCCESS) {
    return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": cuCtxPushCurrent failed: " +
                                describe(*d, scope.rc()));
  }
  // Private copies are made (and tensor maps encoded from them) with the
  // stream's context current.
  if (ffi::Error e = privatise_inputs(*d, stream, args, rets, may_write_inputs, scratch, pointers);
      e.failure()) {
    return e;
  }
  std::vector<TensorMap> maps;
  bad = encode_tensor_maps(*d, tma, pointers, &maps);
  if (!bad.empty()) {
    return ffi::Error::InvalidArgument(JAXPTX_CUDA_TARGET ": kernel " + image->entry + ": " + bad);
  }
  // A raw param's value lies little-endian in the low bytes of its slot;
  // the driver copies as many bytes as the kernel's parameter has (checked
  // above to be the scalar's size).
  std::vector<int64_t> values;
  for (size_t i = 1; i < scalars.size(); i += 2) values.push_back(scalars[i]);
  std::vector<void*> params;
  params.reserve(n + values.size() + maps.size());
  for (size_t i = 0; i < n; ++i) params.push_back(&pointers[i]);
  for (int64_t& v : values) params.push_back(&v);
  for (TensorMap& m : maps) params.push_back(&m);

  CUfunction fn = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    Function& f = g_functions[{kernel_id, ctx}];
    if (!f.fn) {
      if (ffi::Error e = load_function(*d, *image, kernel_id, &f); e.failure()) {
        g_functions.erase({kernel_id, ctx});
        return e;
      }
    }
    if (shape.smem > f.smem_opt_in) {
      rc = d->cuFuncSetAttribute(f.fn, FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 static_cast<int>(shape.smem));
      if (rc != CUDA_SUCCESS) {
        return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": kernel " + image->entry +
                                    " cannot use " + std::to_string(shape.smem) +
                                    " bytes of dynamic shared memory: " + describe(*d, rc));
      }
      f.smem_opt_in = shape.smem;
    }
    fn = f.fn;
  }

  // The launch is validated (call_identity.h): every value fits its field.
  auto u = [](int64_t v) { return static_cast<unsigned>(v); };
  LaunchAttribute attr{};
  attr.id = LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim = {u(shape.cluster[0]), u(shape.cluster[1]), u(shape.cluster[2])};
  bool clustered = shape.cluster_size() > 1;
  LaunchConfig config{};
  config.gridDimX = u(shape.grid[0]);
  config.gridDimY = u(shape.grid[1]);
  config.gridDimZ = u(shape.grid[2]);
  config.blockDimX = u(shape.block[0]);
  config.blockDimY = u(shape.block[1]);
  config.blockDimZ = u(shape.block[2]);
  config.sharedMemBytes = u(shape.smem);
  config.hStream = stream;
  config.attrs = clustered ? &attr : nullptr;
  config.numAttrs = clustered ? 1 : 0;
  std::unique_ptr<LaunchCapture> capture;
  if (LaunchCapture::requested()) {
    std::vector<CapturedBuffer> buffers;
    for (size_t i = 0; i < n; ++i) {
      ffi::AnyBuffer b = i < args.size() ? *args.get<ffi::AnyBuffer>(i)
                                         : **rets.get<ffi::AnyBuffer>(i - args.size());
      auto dims = b.dimensions();
      buffers.push_back({pointers[i], b.size_bytes(), static_cast<int>(b.element_type()),
                         std::vector<int64_t>(dims.begin(), dims.end())});
    }
    capture = LaunchCapture::begin(*d, stream, std::move(buffers), args.size(), image->entry);
  }
  rc = d->cuLaunchKernelEx(&config, fn, params.data(), nullptr);
  if (rc != CUDA_SUCCESS) {
    return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": launching kernel " + image->entry +
                                " failed: " + describe(*d, rc));
  }
  if (capture) {
    capture->finish(*d, stream, kernel_id, ptx, image->entry, shape,
                    std::vector<int64_t>(scalars.begin(), scalars.end()),
                    std::vector<int64_t>(tma.begin(), tma.end()));
  }
  return ffi::Error::Success();
}

ffi::Error launch_impl(CUstream stream, ffi::ScratchAllocator scratch, ffi::RemainingArgs args,
                       ffi::RemainingRets rets, int64_t kernel_id, std::string_view ptx,
                       std::string_view entry, ffi::Dictionary launch_attr,
                       ffi::Span<const int64_t> scalars, ffi::Span<const int64_t> tma,
                       int64_t may_write_inputs, int64_t allow_unwritten) {
  (void)allow_unwritten;  // only the CPU handler can see which bytes a kernel wrote
  try {
    return launch(stream, scratch, args, rets, kernel_id, ptx, entry, launch_attr, scalars, tma,
                  may_write_inputs);
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string(JAXPTX_CUDA_TARGET ": ") + e.what());
  } catch (...) {
    return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": unknown C++ exception");
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxptxLaunch, launch_impl,
                              jaxptx::bind_launch_attributes(
                                  ffi::Ffi::Bind()
                                      .Ctx<ffi::PlatformStream<CUstream>>()
                                      .Ctx<ffi::ScratchAllocator>()
                                      .RemainingArgs()
                                      .RemainingRets()));

namespace jaxptx {

void cuda_register(int64_t kernel_id, const std::string& image, const std::string& ptx,
                   const std::string& entry, int64_t num_params) {
  if (image.empty()) throw nb::value_error("cuda_register: empty module image");
  if (num_params < 0) throw nb::value_error("cuda_register: num_params must be >= 0");
  std::shared_ptr<const Image> img = make_image(image, entry, num_params, ptx);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto [it, inserted] = g_images.emplace(kernel_id, img);
  if (!inserted) {
    const Image& old = *it->second;
    if (old.data != img->data || old.entry != entry || old.num_params != num_params ||
        old.ptx != ptx) {
      throw nb::value_error(("cuda_register: kernel id " + std::to_string(kernel_id) +
                             " is already registered with different content")
                                .c_str());
    }
  }
}

bool cuda_registered(int64_t kernel_id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_images.count(kernel_id) != 0;
}

std::string cuda_driver_error() {
  const char* why = nullptr;
  return cu::driver(&why) ? std::string() : std::string(why);
}

}  // namespace jaxptx
