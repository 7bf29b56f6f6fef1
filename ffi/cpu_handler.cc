// jaxptx_cpu_v2: the CPU platform's FFI handler. It takes the GIL and calls the
// Python callback registered by jaxptx.jax with the kernel id, zero-copy
// memoryviews of the input and output buffers, and the call's own copy of
// the kernel (its PTX, entry and launch, from the attributes), so a
// deserialised export runs in a process that never lowered the kernel. The
// callback runs the kernel on the emulator, writing the outputs in place.
// Also here: the handlers of the retired version-1 targets (both platforms).

#include <atomic>
#include <chrono>
#include <exception>
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
};

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
    nb::object result = nb::handle(g_cpu_callback)(
        k.kernel_id, nb::tuple(ins), nb::tuple(outs), ptx,
        nb::str(k.entry.data(), k.entry.size()), launch_tuple(launch), ints(k.scalars),
        ints(k.tma), nb::tuple(in_types), nb::tuple(out_types), k.allow_unwritten);
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

ffi::Error cpu_impl(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t kernel_id,
                    std::string_view ptx, std::string_view entry, ffi::Dictionary launch,
                    ffi::Span<const int64_t> scalars, ffi::Span<const int64_t> tma,
                    int64_t may_write_inputs, int64_t allow_unwritten) {
  (void)may_write_inputs;  // the emulator always runs on copies of the inputs
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
    result = call_python(Call{kernel_id, ptx, entry, launch, scalars, tma, allow_unwritten}, args,
                         rets);
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
                              jaxptx::bind_launch_attributes(
                                  ffi::Ffi::Bind().RemainingArgs().RemainingRets()));

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
