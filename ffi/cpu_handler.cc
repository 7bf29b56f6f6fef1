// jaxptx_cpu_v2: the CPU platform's FFI handler. It takes the GIL and calls the
// Python callback registered by jaxptx.jax with the kernel id, zero-copy
// memoryviews of the input and output buffers, and the call's own copy of
// the kernel (its PTX, entry and launch, from the attributes), so a
// deserialised export runs in a process that never lowered the kernel. The
// callback runs the kernel on the emulator, writing the outputs in place.
// A call of a kernel with peers carries one more attribute, `peers` (a
// dictionary: axis_name, axis_size, buffers, multimem, site), passed on as a
// twelfth argument; the callback then meets the other devices' calls, waiting
// in Python (which releases the GIL) until all have arrived.
// Also here: the handlers of the retired version-1 targets (both platforms).

#include <atomic>
#include <chrono>
#include <exception>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "call_identity.h"
#include "handlers.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace {

// A strong reference that is never released: dropping it at interpreter
// exit, after Python has finalised, would crash.
PyObject* g_cpu_callback = nullptr;

// A view of `size` bytes at `data`. Zero-size buffers may have no address;
// a memoryview still needs one.
nb::object view(void* data, size_t size, bool writable) {
  static char empty = 0;
  char* p = data ? static_cast<char*>(data) : &empty;
  PyObject* mv = PyMemoryView_FromMemory(p, static_cast<Py_ssize_t>(size),
                                         writable ? PyBUF_WRITE : PyBUF_READ);
  if (!mv) throw nb::python_error();
  return nb::steal(mv);
}

// The views must not outlive this call: XLA owns the memory. release()
// fails only if something still exports the view, which the callback
// avoids; the failure is then cleared rather than reported.
void release(nb::handle views) {
  for (nb::handle v : views) {
    PyObject* r = PyObject_CallMethod(v.ptr(), "release", nullptr);
    if (r) Py_DECREF(r); else PyErr_Clear();
  }
}

// XLA may still run computations on its threads when Python exits (the
// other devices' copies of a replicated result nobody read). A thread that
// asks for the GIL after finalisation starts is ended by a forced unwind,
// which XLA's frames swallow: the process aborts. So an atexit hook
// (cpu_shutdown) closes the handler and waits for the calls in flight.
std::atomic<bool> g_closing{false};
std::atomic<int> g_in_flight{0};

struct InFlight {
  InFlight() { g_in_flight.fetch_add(1); }
  ~InFlight() { g_in_flight.fetch_sub(1); }
};

template <typename Ints>
nb::tuple ints(const Ints& v) {
  nb::list out;
  for (auto x : v) out.append(nb::int_(x));
  return nb::tuple(out);
}

// The launch as the callback takes it: (grid, block, cluster, smem).
nb::tuple launch_tuple(const jaxptx::LaunchShape& s) {
  return nb::make_tuple(ints(s.grid), ints(s.block), ints(s.cluster), s.smem);
}

// What the call says about its kernel, beside the buffers.
struct Call {
  int64_t kernel_id;
  std::string_view ptx;
  std::string_view entry;
  ffi::Dictionary launch;
  ffi::Span<const int64_t> scalars, tma;
  int64_t allow_unwritten;
  nb::object peers;  // None, or (axis_name, axis_size, buffers, multimem, site)
};

// The handler takes all of a call's attributes as one dictionary, so that a
// call of a kernel with peers may carry `peers` beside the attributes every
// call has (handlers.h: bind_launch_attributes, whose names these are).
constexpr std::string_view kAttributes[] = {"kernel_id", "ptx", "entry", "launch", "scalars",
                                            "tma", "may_write_inputs", "allow_unwritten"};
constexpr std::string_view kPeerAttributes[] = {"axis_name", "axis_size", "buffers", "multimem",
                                                "site"};

template <typename T>
std::optional<T> decode(const ffi::Dictionary& attrs, std::string_view name,
                        std::string_view where, std::string* bad) {
  auto value = attrs.get<T>(name);
  if (!value.has_value()) {
    if (bad->empty()) {
      *bad = std::string(jaxptx::kCpuTarget) + ": attribute " + std::string(where) +
             std::string(name) + ": " + value.error().message();
    }
    return std::nullopt;
  }
  return *value;
}

// Names in `attrs` that are not in `known` (nor `also`), for the error of a
// call that carries attributes this handler does not read.
template <size_t N>
std::string unknown_names(const ffi::Dictionary& attrs, const std::string_view (&known)[N],
                          std::string_view also = {}) {
  std::string out;
  for (auto it = attrs.begin(); it != attrs.end(); ++it) {
    std::string_view name = *it;
    bool found = !also.empty() && name == also;
    for (std::string_view k : known) found = found || k == name;
    if (!found) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

// The `peers` dictionary as the callback takes it, or None with `bad` set.
nb::object decode_peers(const ffi::Dictionary& attrs, std::string* bad) {
  auto peers = decode<ffi::Dictionary>(attrs, "peers", "", bad);
  if (!peers) return nb::none();
  std::string extra = unknown_names(*peers, kPeerAttributes);
  if (!extra.empty()) {
    *bad = std::string(jaxptx::kCpuTarget) + ": attribute peers: unknown members " + extra +
           " (this jaxptx reads axis_name, axis_size, buffers, multimem, site)";
    return nb::none();
  }
  auto axis = decode<std::string_view>(*peers, "axis_name", "peers.", bad);
  auto size = decode<int64_t>(*peers, "axis_size", "peers.", bad);
  auto buffers = decode<ffi::Span<const int64_t>>(*peers, "buffers", "peers.", bad);
  auto multimem = decode<int64_t>(*peers, "multimem", "peers.", bad);
  auto site = decode<int64_t>(*peers, "site", "peers.", bad);
  if (!bad->empty()) return nb::none();
  return nb::make_tuple(nb::str(axis->data(), axis->size()), *size, ints(*buffers), *multimem,
                        *site);
}

// The call's attributes, or nothing with `bad` saying why.
std::optional<Call> decode_call(const ffi::Dictionary& attrs, std::string* bad) {
  std::string extra = unknown_names(attrs, kAttributes, "peers");
  if (!extra.empty()) {
    *bad = std::string(jaxptx::kCpuTarget) + ": unknown attributes " + extra +
           " (lowered by another jaxptx? lower the function again with this one)";
    return std::nullopt;
  }
  std::string missing;
  for (std::string_view name : kAttributes) {
    if (!attrs.contains(name)) missing += (missing.empty() ? "" : ", ") + std::string(name);
  }
  if (!missing.empty()) {
    *bad = std::string(jaxptx::kCpuTarget) + ": Wrong number of attributes: expected " +
           std::to_string(std::size(kAttributes)) + " (and peers, for a kernel with peers) but got " +
           std::to_string(attrs.size()) + "; missing " + missing;
    return std::nullopt;
  }
  auto kernel_id = decode<int64_t>(attrs, "kernel_id", "", bad);
  auto ptx = decode<std::string_view>(attrs, "ptx", "", bad);
  auto entry = decode<std::string_view>(attrs, "entry", "", bad);
  auto launch = decode<ffi::Dictionary>(attrs, "launch", "", bad);
  auto scalars = decode<ffi::Span<const int64_t>>(attrs, "scalars", "", bad);
  auto tma = decode<ffi::Span<const int64_t>>(attrs, "tma", "", bad);
  // may_write_inputs is read for its type only: the emulator always runs on
  // copies of the inputs.
  decode<int64_t>(attrs, "may_write_inputs", "", bad);
  auto allow_unwritten = decode<int64_t>(attrs, "allow_unwritten", "", bad);
  nb::object peers = attrs.contains("peers") ? decode_peers(attrs, bad) : nb::none();
  if (!bad->empty()) return std::nullopt;
  return Call{*kernel_id, *ptx, *entry, *launch, *scalars, *tma, *allow_unwritten, peers};
}

// The numpy (or ml_dtypes) name of an XLA element type; "" for one numpy
// cannot view (the callback then sees raw bytes).
const char* numpy_name(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::PRED: return "bool";
    case ffi::DataType::S8: return "int8";
    case ffi::DataType::S16: return "int16";
    case ffi::DataType::S32: return "int32";
    case ffi::DataType::S64: return "int64";
    case ffi::DataType::U8: return "uint8";
    case ffi::DataType::U16: return "uint16";
    case ffi::DataType::U32: return "uint32";
    case ffi::DataType::U64: return "uint64";
    case ffi::DataType::F16: return "float16";
    case ffi::DataType::F32: return "float32";
    case ffi::DataType::F64: return "float64";
    case ffi::DataType::BF16: return "bfloat16";
    case ffi::DataType::C64: return "complex64";
    case ffi::DataType::C128: return "complex128";
    case ffi::DataType::F8E5M2: return "float8_e5m2";
    case ffi::DataType::F8E4M3FN: return "float8_e4m3fn";
    default: return "";
  }
}

template <typename Buffer>
nb::tuple buffer_type(const Buffer& b) {
  nb::list dims;
  for (int64_t d : b.dimensions()) dims.append(nb::int_(d));
  return nb::make_tuple(nb::str(numpy_name(b.element_type())), nb::tuple(dims));
}

ffi::Error call_python(const Call& k, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  if (!g_cpu_callback) {
    return ffi::Error::Internal(std::string(jaxptx::kCpuTarget) +
                                ": no Python callback registered; call "
                                "jaxptx.jax.register_ffi_targets() in this process");
  }
  nb::list ins, outs, in_types, out_types;
  std::vector<int64_t> in_bytes, out_bytes;
  for (size_t i = 0; i < args.size(); ++i) {
    auto buf = args.get<ffi::AnyBuffer>(i);
    if (!buf.has_value()) return buf.error();
    in_bytes.push_back(static_cast<int64_t>(buf->size_bytes()));
    in_types.append(buffer_type(*buf));
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto buf = rets.get<ffi::AnyBuffer>(i);
    if (!buf.has_value()) return buf.error();
    out_bytes.push_back(static_cast<int64_t>((*buf)->size_bytes()));
    out_types.append(buffer_type(**buf));
  }
  jaxptx::LaunchShape launch;
  std::string bad = jaxptx::check_call(jaxptx::kCpuTarget, k.kernel_id, k.ptx, k.entry, k.launch,
                                       k.tma, in_bytes, out_bytes, &launch);
  if (!bad.empty()) return ffi::Error::InvalidArgument(bad);
  for (size_t i = 0; i < args.size(); ++i) {
    auto buf = args.get<ffi::AnyBuffer>(i);
    ins.append(view(buf->untyped_data(), buf->size_bytes(), false));
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto buf = rets.get<ffi::AnyBuffer>(i);
    outs.append(view((*buf)->untyped_data(), (*buf)->size_bytes(), true));
  }
  nb::object ptx = view(const_cast<char*>(k.ptx.data()), k.ptx.size(), false);
  std::string message;
  try {
    nb::handle fn(g_cpu_callback);
    nb::str entry(k.entry.data(), k.entry.size());
    nb::object result =
        k.peers.is_none()
            ? fn(k.kernel_id, nb::tuple(ins), nb::tuple(outs), ptx, entry, launch_tuple(launch),
                 ints(k.scalars), ints(k.tma), nb::tuple(in_types), nb::tuple(out_types),
                 k.allow_unwritten)
            : fn(k.kernel_id, nb::tuple(ins), nb::tuple(outs), ptx, entry, launch_tuple(launch),
                 ints(k.scalars), ints(k.tma), nb::tuple(in_types), nb::tuple(out_types),
                 k.allow_unwritten, k.peers);
    if (!result.is_none()) message = nb::str(result).c_str();
  } catch (nb::python_error& e) {
    message = std::string(jaxptx::kCpuTarget) +
              ": the Python callback raised: " + jaxptx::describe_python_error(e);
  }
  ins.append(ptx);
  release(ins);
  release(outs);
  if (!message.empty()) return ffi::Error::Internal(message);
  return ffi::Error::Success();
}

ffi::Error cpu_impl(ffi::RemainingArgs args, ffi::RemainingRets rets, ffi::Dictionary attrs) {
  // Counted before the check, so cpu_shutdown either sees this call in
  // flight and waits for it, or this call sees the shutdown.
  InFlight guard;
  if (g_closing.load() || !Py_IsInitialized()) {
    return ffi::Error::Internal(std::string(jaxptx::kCpuTarget) +
                                ": Python is shutting down; kernel not run");
  }
  // Every exception is caught while the GIL is still held: formatting and
  // destroying a Python error needs it.
  PyGILState_STATE gil = PyGILState_Ensure();
  ffi::Error result;
  try {
    std::string bad;
    std::optional<Call> call = decode_call(attrs, &bad);
    result = call ? call_python(*call, args, rets) : ffi::Error::InvalidArgument(bad);
  } catch (nb::python_error& e) {
    result = ffi::Error::Internal(std::string(jaxptx::kCpuTarget) + ": " +
                                  jaxptx::describe_python_error(e));
  } catch (const std::exception& e) {
    result = ffi::Error::Internal(std::string(jaxptx::kCpuTarget) + ": " + e.what());
  } catch (...) {
    result = ffi::Error::Internal(std::string(jaxptx::kCpuTarget) + ": unknown C++ exception");
  }
  PyGILState_Release(gil);
  return result;
}

// A call of a retired version-1 target: refused, naming the versions and
// the fix. It takes any attributes (version 1's among them).
ffi::Error retired(std::string_view old_target, std::string_view new_target,
                   ffi::Dictionary attrs) {
  std::string kernel;
  if (attrs.contains<std::string_view>("entry")) {
    kernel = " (kernel " + std::string(*attrs.get<std::string_view>("entry")) + ")";
  }
  return ffi::Error(
      ffi::ErrorCode::kFailedPrecondition,
      std::string(old_target) + kernel + ": this custom call was lowered by an older jaxptx, "
      "whose FFI targets are version 1 (grid, block, cluster and smem as four attributes); this "
      "jaxptx handles version 2 (" + std::string(new_target) + ", one launch attribute). Lower "
      "and export the function again with this jaxptx, or run the artifact with the jaxptx "
      "version that exported it");
}

ffi::Error cpu_retired(ffi::RemainingArgs, ffi::RemainingRets, ffi::Dictionary attrs) {
  return retired(jaxptx::kRetiredCpuTarget, jaxptx::kCpuTarget, attrs);
}

ffi::Error cuda_retired(ffi::RemainingArgs, ffi::RemainingRets, ffi::Dictionary attrs) {
  return retired(jaxptx::kRetiredCudaTarget, jaxptx::kCudaTarget, attrs);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxptxCpu, cpu_impl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attrs<ffi::Dictionary>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxptxCpuRetiredV1, cpu_retired,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attrs<ffi::Dictionary>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxptxLaunchRetiredV1, cuda_retired,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attrs<ffi::Dictionary>());

namespace jaxptx {

void cpu_shutdown() {
  g_closing.store(true);
  nb::gil_scoped_release release;  // the calls in flight need the GIL to finish
  while (g_in_flight.load() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void set_cpu_callback(nb::object fn) {
  if (!fn.is_none() && !PyCallable_Check(fn.ptr())) {
    throw nb::type_error("set_cpu_callback: expected a callable or None");
  }
  PyObject* old = g_cpu_callback;
  g_cpu_callback = fn.is_none() ? nullptr : fn.inc_ref().ptr();
  Py_XDECREF(old);
}

}  // namespace jaxptx
