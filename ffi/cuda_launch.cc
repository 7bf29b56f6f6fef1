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
// The handler takes its attributes as one dictionary, decoded by name, so
// that a call of a kernel with peers may carry one more, `peers`: its rank
// operand (last) is then no pointer parameter; the ranks of its mesh axis
// meet on the host before any launches (cuda_peers.h), and the kernel gets
// its rank and peer table as two hidden parameters after the others; a peer
// tensor whose multicast address it takes is a multicast workspace for the
// launch (cuda_multicast.h): the kernel's pointer to it is the workspace's,
// and an output's workspace is copied back into XLA's buffer after it.
// Every failure is returned as an ffi::Error.

#include <algorithm>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "call_identity.h"
#include "cuda_driver.h"
#include "cuda_modules.h"
#include "cuda_peers.h"
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
// `n_in` inputs are the kernel's (a rank operand after them is not).
ffi::Error privatise_inputs(const Driver& d, CUstream stream, ffi::RemainingArgs args,
                            size_t n_in, ffi::RemainingRets rets, int64_t may_write_inputs,
                            ffi::ScratchAllocator& scratch, std::vector<void*>& pointers) {
  for (size_t i = 0; i < n_in; ++i) {
    // The mask holds bits 0..62; inputs past them are always copied.
    if (i < 63 && !((may_write_inputs >> i) & 1)) continue;
    bool aliased = false;
    for (size_t j = 0; j < rets.size(); ++j) aliased |= pointers[n_in + j] == pointers[i];
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

// A call's attributes (handlers.h: bind_launch_attributes names the eight
// every call has), and `peers` for a kernel with peers.
struct Call {
  int64_t kernel_id;
  std::string_view ptx, entry;
  ffi::Dictionary launch;
  ffi::Span<const int64_t> scalars, tma;
  int64_t may_write_inputs;
  std::optional<ffi::Dictionary> peers;
};

constexpr std::string_view kAttributes[] = {"kernel_id", "ptx", "entry", "launch", "scalars",
                                            "tma", "may_write_inputs", "allow_unwritten"};

template <typename T>
std::optional<T> member(const ffi::Dictionary& attrs, std::string_view name, std::string* bad) {
  auto value = attrs.get<T>(name);
  if (value.has_value()) return *value;
  if (bad->empty()) {
    *bad = JAXPTX_CUDA_TARGET ": attribute " + std::string(name) + ": " + value.error().message();
  }
  return std::nullopt;
}

// The call's attributes, or nothing with `bad` saying why.
std::optional<Call> decode_call(const ffi::Dictionary& attrs, std::string* bad) {
  std::string extra, missing;
  for (auto it = attrs.begin(); it != attrs.end(); ++it) {
    std::string_view name = *it;
    if (name != "peers" &&
        std::find(std::begin(kAttributes), std::end(kAttributes), name) == std::end(kAttributes)) {
      extra += (extra.empty() ? "" : ", ") + std::string(name);
    }
  }
  for (std::string_view name : kAttributes) {
    if (!attrs.contains(name)) missing += (missing.empty() ? "" : ", ") + std::string(name);
  }
  if (!extra.empty() || !missing.empty()) {
    *bad = JAXPTX_CUDA_TARGET ": the call's attributes are not this jaxptx's (lowered by another "
           "jaxptx? lower the function again with this one): " +
           (extra.empty() ? "" : "unknown " + extra + (missing.empty() ? "" : "; ")) +
           (missing.empty() ? "" : "missing " + missing);
    return std::nullopt;
  }
  auto kernel_id = member<int64_t>(attrs, "kernel_id", bad);
  auto ptx = member<std::string_view>(attrs, "ptx", bad);
  auto entry = member<std::string_view>(attrs, "entry", bad);
  auto launch = member<ffi::Dictionary>(attrs, "launch", bad);
  auto scalars = member<ffi::Span<const int64_t>>(attrs, "scalars", bad);
  auto tma = member<ffi::Span<const int64_t>>(attrs, "tma", bad);
  auto may_write = member<int64_t>(attrs, "may_write_inputs", bad);
  // allow_unwritten is read for its type only: only the CPU handler can see
  // which bytes a kernel wrote.
  member<int64_t>(attrs, "allow_unwritten", bad);
  std::optional<ffi::Dictionary> peers;
  if (attrs.contains("peers")) peers = member<ffi::Dictionary>(attrs, "peers", bad);
  if (!bad->empty()) return std::nullopt;
  return Call{*kernel_id, *ptx, *entry, *launch, *scalars, *tma, *may_write, peers};
}

// The kernel's parameters as the call passes them: a pointer per tensor,
// each raw scalar's value (little-endian in the low bytes of its slot; the
// driver copies as many bytes as the kernel's parameter has, checked to be
// the scalar's size), each TMA descriptor, and for a kernel with peers its
// rank and peer table. The pointers point into the vectors given.
std::vector<void*> kernel_params(std::vector<void*>& pointers, std::vector<int64_t>& values,
                                 std::vector<TensorMap>& maps, PeerParams* peers) {
  std::vector<void*> params;
  for (void*& p : pointers) params.push_back(&p);
  for (int64_t& v : values) params.push_back(&v);
  for (TensorMap& m : maps) params.push_back(&m);
  if (peers) {
    params.push_back(&peers->rank);
    params.push_back(&peers->table);
  }
  return params;
}

ffi::Error launch(CUstream stream, ffi::ScratchAllocator& scratch, ffi::RemainingArgs args,
                  ffi::RemainingRets rets, const Call& call) {
  // A kernel with peers has its rank as a last operand, which is no tensor.
  const size_t n_in = args.size() - (call.peers && args.size() > 0 ? 1 : 0);
  const size_t n = n_in + rets.size();
  std::string entry(call.entry);
  std::vector<int64_t> in_bytes, out_bytes;
  std::vector<void*> pointers(n);  // the inputs', then the outputs' device addresses
  void* rank_buffer = nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    auto buf = args.get<ffi::AnyBuffer>(i);
    if (!buf.has_value()) return buf.error();
    in_bytes.push_back(static_cast<int64_t>(buf->size_bytes()));
    (i < n_in ? pointers[i] : rank_buffer) = buf->untyped_data();
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto buf = rets.get<ffi::AnyBuffer>(i);
    if (!buf.has_value()) return buf.error();
    out_bytes.push_back(static_cast<int64_t>((*buf)->size_bytes()));
    pointers[n_in + i] = (*buf)->untyped_data();
  }
  jaxptx::LaunchShape shape;
  std::string bad = jaxptx::check_call(jaxptx::kCudaTarget, call.kernel_id, call.ptx, call.entry,
                                       call.launch, call.tma, in_bytes, out_bytes, &shape);
  if (!bad.empty()) return ffi::Error::InvalidArgument(bad);
  if (call.scalars.size() % 2 != 0) {
    return ffi::Error::InvalidArgument(JAXPTX_CUDA_TARGET ": kernel " + entry +
                                       ": the scalars attribute is not (bytes, bits) pairs");
  }
  std::optional<PeerCall> peers;
  if (call.peers) {
    peers.emplace();
    bad = decode_peers(*call.peers, n, &*peers);
    if (bad.empty() && (args.size() == 0 || in_bytes.back() != 4)) {
      bad = "a call over a mesh axis has its rank as a last 4-byte operand; got " +
            std::to_string(args.size()) + " operands";
    }
    if (!bad.empty()) {
      return ffi::Error::InvalidArgument(JAXPTX_CUDA_TARGET ": kernel " + entry + ": " + bad);
    }
  }
  // Peer tensors' addresses are handed to the other ranks, whose kernels
  // may store into them (through addresses the kernel loads from its peer
  // table, which the may_write_inputs analysis cannot follow): an input
  // among them is always a private copy. One with a multicast workspace
  // never is: the kernel gets the workspace, into which XLA's buffer is
  // copied, and never sees the buffer.
  int64_t may_write_inputs = call.may_write_inputs;
  std::vector<bool> workspace(n, false);
  for (size_t k = 0; peers && k < peers->buffers.size(); ++k) {
    const int64_t t = peers->buffers[k];
    workspace[static_cast<size_t>(t)] = k < 63 && ((peers->multimem >> k) & 1);
    if (static_cast<size_t>(t) >= n_in || t >= 63) continue;
    if (workspace[static_cast<size_t>(t)]) {
      may_write_inputs &= ~(int64_t{1} << t);
    } else {
      may_write_inputs |= int64_t{1} << t;
    }
  }
  std::vector<TiledMapArgs> records;
  bad = decode_tensor_maps(call.tma, n, &records);
  for (const TiledMapArgs& r : records) {
    if (bad.empty() && workspace[r.buffer]) {
      bad = "a TMA descriptor is over tensor " + std::to_string(r.buffer) +
            ", whose multicast address the kernel takes: on GPUs that tensor is a multicast "
            "workspace known only once every rank has met, after the descriptors are encoded; "
            "load it without TMA, or use peer_ptr";
    }
  }
  if (!bad.empty()) {
    return ffi::Error::InvalidArgument(JAXPTX_CUDA_TARGET ": kernel " + entry + ": " + bad);
  }
  const char* why = nullptr;
  const Driver* d = driver(&why);
  if (!d) return ffi::Error::Internal(std::string(JAXPTX_CUDA_TARGET ": ") + why);
  // Images count every operand (jaxptx/jax/_lowering.py registers them so).
  const size_t n_operands = args.size() + rets.size();
  std::shared_ptr<const Image> image =
      image_for(call.kernel_id, call.ptx, call.entry, static_cast<int64_t>(n_operands), &bad);
  if (!image) return ffi::Error::InvalidArgument(bad);
  if (static_cast<int64_t>(n_operands) != image->num_params) {
    return ffi::Error::InvalidArgument(
        JAXPTX_CUDA_TARGET ": kernel " + image->entry + " takes " +
        std::to_string(image->num_params) + " pointer parameters, got " +
        std::to_string(n_operands) + " buffers");
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
  if (ffi::Error e = function_for(*d, *image, call.kernel_id, ctx, &function); e.failure()) {
    return e;
  }
  std::vector<int64_t> declared = function.param_bytes;
  if (peers) bad = split_hidden_params(function.param_bytes, &declared);
  if (bad.empty()) {
    bad = jaxptx::check_params(declared, n, call.scalars.begin(), call.scalars.size() / 2,
                               records.size());
  }
  if (!bad.empty()) {
    return ffi::Error::InvalidArgument(JAXPTX_CUDA_TARGET ": kernel " + image->entry + ": " + bad);
  }
  if (ffi::Error e = opt_in_smem(*d, *image, call.kernel_id, ctx, shape.smem); e.failure()) {
    return e;
  }
  // Private copies are made (and tensor maps encoded from them) with the
  // stream's context current.
  if (ffi::Error e = privatise_inputs(*d, stream, args, n_in, rets, may_write_inputs,
                                      scratch, pointers);
      e.failure()) {
    return e;
  }
  std::vector<TensorMap> maps;
  bad = encode_tensor_maps(*d, call.tma, pointers, &maps);
  if (!bad.empty()) {
    return ffi::Error::InvalidArgument(JAXPTX_CUDA_TARGET ": kernel " + image->entry + ": " + bad);
  }
  // A kernel with peers launches only once every rank of its axis is ready
  // (cuda_peers.h); nothing that may fail comes between that and the launch.
  PeerParams peer_params;
  if (peers) {
    std::vector<size_t> nbytes;
    for (size_t i = 0; i < n; ++i) {
      nbytes.push_back(static_cast<size_t>(i < n_in ? in_bytes[i] : out_bytes[i - n_in]));
    }
    PeerRank me{call.kernel_id, image->entry, ctx, stream, rank_buffer, pointers, nbytes, n_in};
    if (ffi::Error e = meet_peers(*d, *peers, me, &peer_params); e.failure()) return e;
    for (const auto& [tensor, view] : peer_params.redirect) {
      pointers[tensor] = reinterpret_cast<void*>(view);
    }
  }
  std::vector<int64_t> values;
  for (size_t i = 1; i < call.scalars.size(); i += 2) values.push_back(call.scalars[i]);
  std::vector<void*> params =
      kernel_params(pointers, values, maps, peers ? &peer_params : nullptr);

  LaunchAttribute cluster{};
  LaunchConfig config = launch_config(shape, stream, &cluster);
  // A capture records one device's launch; a kernel with peers is not one.
  std::unique_ptr<LaunchCapture> capture =
      LaunchCapture::requested() && !peers
          ? begin_capture(*d, stream, args, rets, pointers, image->entry)
          : nullptr;
  CUresult rc = d->cuLaunchKernelEx(&config, function.fn, params.data(), nullptr);
  if (rc != CUDA_SUCCESS) {
    return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": launching kernel " + image->entry +
                                " failed: " + describe(*d, rc));
  }
  // Outputs that were multicast workspaces for the launch, back into XLA's
  // buffers, after it on the stream.
  for (const CopyOut& c : peer_params.copy_out) {
    rc = d->cuMemcpyDtoDAsync_v2(c.dst, c.src, c.nbytes, stream);
    if (rc != CUDA_SUCCESS) {
      return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": kernel " + image->entry +
                                  ": copying a multicast workspace back into its output failed: " +
                                  describe(*d, rc));
    }
  }
  if (capture) {
    capture->finish(*d, stream, call.kernel_id, call.ptx, image->entry, shape,
                    std::vector<int64_t>(call.scalars.begin(), call.scalars.end()),
                    std::vector<int64_t>(call.tma.begin(), call.tma.end()));
  }
  return ffi::Error::Success();
}

ffi::Error launch_impl(CUstream stream, ffi::ScratchAllocator scratch, ffi::RemainingArgs args,
                       ffi::RemainingRets rets, ffi::Dictionary attrs) {
  try {
    std::string bad;
    std::optional<Call> call = decode_call(attrs, &bad);
    if (!call) return ffi::Error::InvalidArgument(bad);
    return launch(stream, scratch, args, rets, *call);
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string(JAXPTX_CUDA_TARGET ": ") + e.what());
  } catch (...) {
    return ffi::Error::Internal(JAXPTX_CUDA_TARGET ": unknown C++ exception");
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxptxLaunch, launch_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<CUstream>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attrs<ffi::Dictionary>());

namespace jaxptx {

std::string cuda_driver_error() {
  const char* why = nullptr;
  return cu::driver(&why) ? std::string() : std::string(why);
}

}  // namespace jaxptx
