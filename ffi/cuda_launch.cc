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
// Before anything is copied or launched, the call's parameter list (buffer
// pointers, raw scalars, TMA descriptors) is checked against the parameters
// the loaded kernel has, as the driver reports them (cuFuncGetParamInfo,
// kernel_params.h): the driver copies as many bytes through each parameter
// pointer as the kernel's parameter has.
// The driver is reached only through the Driver table of cuda_driver.h:
// libcuda.so.1, opened with dlopen on first use (so the extension builds and
// imports with no driver), or a table swapped in with set_cuda_driver (how
// the testing layer runs this handler on the emulator with no GPU).
// Every failure is returned as an ffi::Error.

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "call_identity.h"
#include "cuda_driver.h"
#include "cuda_modules.h"
#include "handlers.h"
#include "kernel_params.h"
#include "launch_capture.h"
#include "tensor_maps.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace {

using namespace jaxptx::cu;

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

// The context of XLA's stream, else the current one.
ffi::Error context_of(const Driver& d, CUstream stream, CUcontext* ctx) {
  CUresult stream_rc = d.cuStreamGetCtx(stream, ctx);
  CUresult rc = stream_rc;
  if (rc != CUDA_SUCCESS || !*ctx) rc = d.cuCtxGetCurrent(ctx);
  if (rc != CUDA_SUCCESS || !*ctx) {
    return ffi::Error::Internal(
        JAXPTX_CUDA_TARGET ": no CUDA context for XLA's stream: cuStreamGetCtx gave " +
        (stream_rc != CUDA_SUCCESS ? describe(d, stream_rc) : std::string("no context")) +
        ", and " + (rc != CUDA_SUCCESS ? "cuCtxGetCurrent failed: " + describe(d, rc)
                                       : std::string("no context is current")));
  }
  return ffi::Error::Success();
}

// The cuLaunchKernelEx configuration of `shape` on `stream`; `cluster`
// holds its cluster attribute (passed only when a cluster has more than one
// block). The launch is validated (call_identity.h): every value fits.
LaunchConfig launch_config(const jaxptx::LaunchShape& shape, CUstream stream,
                           LaunchAttribute* cluster) {
  auto u = [](int64_t v) { return static_cast<unsigned>(v); };
  cluster->id = LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster->value.clusterDim = {u(shape.cluster[0]), u(shape.cluster[1]), u(shape.cluster[2])};
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
  config.attrs = clustered ? cluster : nullptr;
  config.numAttrs = clustered ? 1 : 0;
  return config;
}

// Starts the capture of a launch (JAXPTX_CAPTURE_DIR): each pointer
// parameter's buffer as the kernel gets it (a private copy's address).
std::unique_ptr<LaunchCapture> begin_capture(const Driver& d, CUstream stream,
                                             ffi::RemainingArgs args, ffi::RemainingRets rets,
                                             const std::vector<void*>& pointers,
                                             const std::string& entry) {
  std::vector<CapturedBuffer> buffers;
  for (size_t i = 0; i < pointers.size(); ++i) {
    ffi::AnyBuffer b = i < args.size() ? *args.get<ffi::AnyBuffer>(i)
                                       : **rets.get<ffi::AnyBuffer>(i - args.size());
    auto dims = b.dimensions();
    buffers.push_back({pointers[i], b.size_bytes(), static_cast<int>(b.element_type()),
                       std::vector<int64_t>(dims.begin(), dims.end())});
  }
  return LaunchCapture::begin(d, stream, std::move(buffers), args.size(), entry);
}

ffi::Error launch(CUstream stream, ffi::ScratchAllocator& scratch, ffi::RemainingArgs args,
                  ffi::RemainingRets rets, int64_t kernel_id, std::string_view ptx,
                  std::string_view entry, ffi::Dictionary launch_attr,
                  ffi::Span<const int64_t> scalars, ffi::Span<const int64_t> tma,
                  int64_t may_write_inputs) {
  size_t n = args.size() + rets.size();
  std::vector<int64_t> in_bytes, out_bytes;
  std::vector<void*> pointers(n);  // the inputs', then the outputs' device addresses
  for (size_t i = 0; i < args.size(); ++i) {
    auto buf = args.get<ffi::AnyBuffer>(i);
    if (!buf.has_value()) return buf.error();
    in_bytes.push_back(static_cast<int64_t>(buf->size_bytes()));
    pointers[i] = buf->untyped_data();
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto buf = rets.get<ffi::AnyBuffer>(i);
    if (!buf.has_value()) return buf.error();
    out_bytes.push_back(static_cast<int64_t>((*buf)->size_bytes()));
    pointers[args.size() + i] = (*buf)->untyped_data();
  }
  jaxptx::LaunchShape shape;
  std::string bad = jaxptx::check_call(jaxptx::kCudaTarget, kernel_id, ptx, entry, launch_attr, tma,
                                       in_bytes, out_bytes, &shape);
  if (!bad.empty()) return ffi::Error::InvalidArgument(bad);
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
  CUcontext ctx = nullptr;
  if (ffi::Error e = context_of(*d, stream, &ctx); e.failure()) return e;
  ScopedContext scope(*d, ctx);
  if (scope.rc() != CUDA_SUCCESS) {
    return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": cuCtxPushCurrent failed: " +
                                describe(*d, scope.rc()));
  }
  // The function (loaded once per context) and its parameters, checked
  // before anything is copied or launched.
  Function function;
  if (ffi::Error e = function_for(*d, *image, kernel_id, ctx, &function); e.failure()) return e;
  bad = jaxptx::check_params(function.param_bytes, n, scalars.begin(), scalars.size() / 2,
                             records.size());
  if (!bad.empty()) {
    return ffi::Error::InvalidArgument(JAXPTX_CUDA_TARGET ": kernel " + image->entry + ": " + bad);
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

  if (ffi::Error e = opt_in_smem(*d, *image, kernel_id, ctx, shape.smem); e.failure()) return e;

  LaunchAttribute cluster{};
  LaunchConfig config = launch_config(shape, stream, &cluster);
  std::unique_ptr<LaunchCapture> capture =
      LaunchCapture::requested() ? begin_capture(*d, stream, args, rets, pointers, image->entry)
                                 : nullptr;
  CUresult rc = d->cuLaunchKernelEx(&config, function.fn, params.data(), nullptr);
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

std::string cuda_driver_error() {
  const char* why = nullptr;
  return cu::driver(&why) ? std::string() : std::string(why);
}

}  // namespace jaxptx
