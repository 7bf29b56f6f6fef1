// A hand-built XLA call frame for the CUDA handler (call_cuda_handler,
// handlers.h): what XLA's GPU runtime hands JaxptxLaunch, built outside XLA.
// jaxptx.torch launches kernels on torch's stream with it (buffers are the
// tensors' device pointers, scratch memory comes from torch's allocator);
// the testing layer calls it with the stand-in device's addresses (the
// handler never dereferences them). Attributes are encoded as XLA encodes
// the custom call's attribute dictionary (sorted by name: the handler's
// decoder looks them up by their sorted index), a dictionary attribute (the
// launch) as a nested, sorted XLA_FFI_Attrs; the XLA_FFI_Api has the entry
// points the handler uses (errors, the stream, scratch memory) and refuses
// the rest.

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "handlers.h"
#include "xla/ffi/api/c_api.h"

namespace nb = nanobind;

namespace jaxptx {

namespace {

struct Error {
  std::string message;
  XLA_FFI_Error_Code code;
};

XLA_FFI_Error* make_error(XLA_FFI_Error_Code code, std::string message) {
  return reinterpret_cast<XLA_FFI_Error*>(new Error{std::move(message), code});
}

// The XLA FFI C API renames entry points between releases (XLA_FFI_API_MINOR
// 4, jaxlib 0.11: Error_GetMessage -> Error_GetDetails, ExecutionContext_Get
// -> InvokeContext_Get). The table is filled by feature tests on the header
// this file is compiled against, never by version guesses at run time: each
// slot is looked up by name (HasSlot), and every function's argument type is
// deduced from its slot, so no renamed Args struct is ever named here.
#define JAXPTX_DETECT(member)                                                  \
  template <typename T, typename = void>                                       \
  struct Has_##member : std::false_type {};                                    \
  template <typename T>                                                        \
  struct Has_##member<T, std::void_t<decltype(&T::member)>> : std::true_type {};
JAXPTX_DETECT(XLA_FFI_Error_GetMessage)
JAXPTX_DETECT(XLA_FFI_Error_GetDetails)
JAXPTX_DETECT(XLA_FFI_ExecutionContext_Get)
JAXPTX_DETECT(XLA_FFI_InvokeContext_Get)
JAXPTX_DETECT(message)
JAXPTX_DETECT(ctx)
#undef JAXPTX_DETECT

// What the frame's execution context holds: the stream and the scratch
// allocator (a Python object, or None).
struct Context {
  uint64_t stream;
  PyObject* scratch;
};

// The context an entry point's arguments carry (the field is `ctx` in every
// header so far; a header without it fails here, at compile time).
template <typename Args>
Context* context_of(Args* args) {
  static_assert(Has_ctx<Args>::value, "XLA FFI arguments without a ctx field: update call_frame.cc");
  return reinterpret_cast<Context*>(args->ctx);
}

XLA_FFI_Error* error_create(XLA_FFI_Error_Create_Args* args) {
  return make_error(args->errc, args->message ? args->message : "");
}

// Error_GetMessage / Error_GetDetails: the error's text.
template <typename Args>
void error_describe(Args* args) {
  static_assert(Has_message<Args>::value, "XLA FFI error query without a message field");
  args->message = reinterpret_cast<Error*>(args->error)->message.c_str();
}

void error_destroy(XLA_FFI_Error_Destroy_Args* args) {
  delete reinterpret_cast<Error*>(args->error);
}

template <typename Args>
XLA_FFI_Error* stream_get(Args* args) {
  args->stream = reinterpret_cast<void*>(static_cast<uintptr_t>(context_of(args)->stream));
  return nullptr;
}

template <typename Args>
XLA_FFI_Error* memory_allocate(Args* args) {
  nb::gil_scoped_acquire gil;
  Context* c = context_of(args);
  if (c->scratch == Py_None) {
    return make_error(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "this frame has no scratch memory");
  }
  try {
    nb::object address = nb::handle(c->scratch).attr("alloc")(args->size, args->alignment);
    args->data = reinterpret_cast<void*>(static_cast<uintptr_t>(nb::cast<uint64_t>(address)));
    return nullptr;
  } catch (nb::python_error& e) {
    return make_error(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                      std::string("scratch alloc: ") + nb::str(e.value()).c_str());
  }
}

template <typename Args>
XLA_FFI_Error* memory_free(Args* args) {
  nb::gil_scoped_acquire gil;
  Context* c = context_of(args);
  if (c->scratch == Py_None) return make_error(XLA_FFI_Error_Code_INTERNAL, "no scratch memory");
  try {
    nb::handle(c->scratch).attr("free")(
        static_cast<uint64_t>(reinterpret_cast<uintptr_t>(args->data)), args->size);
    return nullptr;
  } catch (nb::python_error& e) {
    return make_error(XLA_FFI_Error_Code_INTERNAL,
                      std::string("scratch free: ") + nb::str(e.value()).c_str());
  }
}

// Every other entry point: the CUDA handler does not use them.
template <typename Args>
XLA_FFI_Error* unimplemented(Args*) {
  return make_error(XLA_FFI_Error_Code_UNIMPLEMENTED,
                    "the hand-built call frame does not implement this XLA FFI entry point");
}

// Point `slot` at F<Args>, Args deduced from the slot's own type.
template <template <typename> class F, typename R, typename Args>
void bind(R (*&slot)(Args*)) {
  slot = &F<Args>::call;
}
#define JAXPTX_ADAPT(name)                                  \
  template <typename Args>                                  \
  struct name##_fn {                                        \
    static auto call(Args* args) { return name(args); }     \
  };
JAXPTX_ADAPT(error_describe)
JAXPTX_ADAPT(stream_get)
JAXPTX_ADAPT(memory_allocate)
JAXPTX_ADAPT(memory_free)
JAXPTX_ADAPT(unimplemented)
#undef JAXPTX_ADAPT

// A template, so that the slots a header lacks are never looked up.
template <typename Api>
void fill(Api& a) {
  a.struct_size = XLA_FFI_Api_STRUCT_SIZE;
  a.api_version = {XLA_FFI_Api_Version_STRUCT_SIZE, nullptr, XLA_FFI_API_MAJOR,
                   XLA_FFI_API_MINOR};
  a.XLA_FFI_Error_Create = error_create;
  a.XLA_FFI_Error_Destroy = error_destroy;
  if constexpr (Has_XLA_FFI_Error_GetMessage<Api>::value) bind<error_describe_fn>(a.XLA_FFI_Error_GetMessage);
  if constexpr (Has_XLA_FFI_Error_GetDetails<Api>::value) bind<error_describe_fn>(a.XLA_FFI_Error_GetDetails);
  if constexpr (Has_XLA_FFI_ExecutionContext_Get<Api>::value) {
    bind<unimplemented_fn>(a.XLA_FFI_ExecutionContext_Get);
  }
  if constexpr (Has_XLA_FFI_InvokeContext_Get<Api>::value) bind<unimplemented_fn>(a.XLA_FFI_InvokeContext_Get);
  bind<stream_get_fn>(a.XLA_FFI_Stream_Get);
  bind<memory_allocate_fn>(a.XLA_FFI_DeviceMemory_Allocate);
  bind<memory_free_fn>(a.XLA_FFI_DeviceMemory_Free);
  bind<unimplemented_fn>(a.XLA_FFI_Handler_Register);
  bind<unimplemented_fn>(a.XLA_FFI_Type_Register);
  bind<unimplemented_fn>(a.XLA_FFI_State_Set);
  bind<unimplemented_fn>(a.XLA_FFI_State_Get);
  bind<unimplemented_fn>(a.XLA_FFI_ThreadPool_Schedule);
  bind<unimplemented_fn>(a.XLA_FFI_ThreadPool_NumThreads);
  bind<unimplemented_fn>(a.XLA_FFI_Future_Create);
  bind<unimplemented_fn>(a.XLA_FFI_Future_SetAvailable);
  bind<unimplemented_fn>(a.XLA_FFI_Future_SetError);
  bind<unimplemented_fn>(a.XLA_FFI_RunId_Get);
  bind<unimplemented_fn>(a.XLA_FFI_DeviceOrdinal_Get);
}

const XLA_FFI_Api* api() {
  static const XLA_FFI_Api table = [] {
    XLA_FFI_Api a;
    std::memset(&a, 0, sizeof(a));     // entry points a newer header adds stay null
    fill(a);
    return a;
  }();
  return &table;
}

// The buffers of one side of the frame, and the storage they point into.
struct Buffers {
  std::vector<std::vector<int64_t>> dims;
  std::vector<XLA_FFI_Buffer> buffers;
  std::vector<void*> pointers;
  std::vector<XLA_FFI_ArgType> arg_types;
  std::vector<XLA_FFI_RetType> ret_types;

  explicit Buffers(nb::handle items) {
    for (nb::handle item : items) {
      nb::tuple t = nb::cast<nb::tuple>(item);
      if (t.size() != 3) throw nb::value_error("a buffer is (dtype code, address, dims)");
      dims.push_back(nb::cast<std::vector<int64_t>>(t[2]));
      XLA_FFI_Buffer b;
      std::memset(&b, 0, sizeof(b));
      b.struct_size = XLA_FFI_Buffer_STRUCT_SIZE;
      b.dtype = static_cast<XLA_FFI_DataType>(nb::cast<int>(t[0]));
      b.data = reinterpret_cast<void*>(static_cast<uintptr_t>(nb::cast<uint64_t>(t[1])));
      buffers.push_back(b);
    }
    for (size_t i = 0; i < buffers.size(); ++i) {
      buffers[i].rank = static_cast<int64_t>(dims[i].size());
      buffers[i].dims = dims[i].data();
    }
    for (XLA_FFI_Buffer& b : buffers) pointers.push_back(&b);
    arg_types.assign(buffers.size(), XLA_FFI_ArgType_BUFFER);
    ret_types.assign(buffers.size(), XLA_FFI_RetType_BUFFER);
  }
};

struct Attr;

// Attributes sorted by name as an XLA_FFI_Attrs: the frame's own, or a
// dictionary attribute's members (as XLA passes both).
struct AttrList {
  std::vector<std::unique_ptr<Attr>> items;
  std::vector<XLA_FFI_AttrType> types;
  std::vector<XLA_FFI_ByteSpan*> names;
  std::vector<void*> values;
  XLA_FFI_Attrs attrs;

  // From a sequence of (name, kind, value).
  explicit AttrList(nb::handle seq);
  // The list as the handler's decoder reads it (valid while *this is).
  XLA_FFI_Attrs* get();
};

// One attribute's value in the form XLA passes it.
struct Attr {
  std::string name;
  XLA_FFI_AttrType type;
  int64_t scalar = 0;
  std::string bytes;
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  bool is_i64 = false;  // an array of int64 (else int32)
  std::unique_ptr<AttrList> members;  // a dictionary's
  XLA_FFI_Scalar scalar_value;
  XLA_FFI_Array array_value;
  XLA_FFI_ByteSpan span_value;
  XLA_FFI_ByteSpan name_span;

  // The attribute as the handler's decoder reads it (valid while *this is).
  void* value() {
    switch (type) {
      case XLA_FFI_AttrType_SCALAR:
        scalar_value = {XLA_FFI_DataType_S64, &scalar};
        return &scalar_value;
      case XLA_FFI_AttrType_STRING:
        span_value = {bytes.data(), bytes.size()};
        return &span_value;
      case XLA_FFI_AttrType_DICTIONARY:
        return members->get();
      default:
        array_value = is_i64 ? XLA_FFI_Array{XLA_FFI_DataType_S64, i64.size(), i64.data()}
                             : XLA_FFI_Array{XLA_FFI_DataType_S32, i32.size(), i32.data()};
        return &array_value;
    }
  }
};

std::unique_ptr<Attr> decode_attr(nb::handle item) {
  nb::tuple t = nb::cast<nb::tuple>(item);
  if (t.size() != 3) throw nb::value_error("an attribute is (name, kind, value)");
  auto a = std::make_unique<Attr>();
  a->name = nb::cast<std::string>(t[0]);
  std::string kind = nb::cast<std::string>(t[1]);
  if (kind == "i64") {
    a->type = XLA_FFI_AttrType_SCALAR;
    a->scalar = nb::cast<int64_t>(t[2]);
  } else if (kind == "str") {
    a->type = XLA_FFI_AttrType_STRING;
    nb::bytes b = nb::cast<nb::bytes>(t[2]);
    a->bytes = std::string(b.c_str(), b.size());
  } else if (kind == "i32[]") {
    a->type = XLA_FFI_AttrType_ARRAY;
    a->i32 = nb::cast<std::vector<int32_t>>(t[2]);
  } else if (kind == "i64[]") {
    a->type = XLA_FFI_AttrType_ARRAY;
    a->i64 = nb::cast<std::vector<int64_t>>(t[2]);
    a->is_i64 = true;
  } else if (kind == "dict") {
    a->type = XLA_FFI_AttrType_DICTIONARY;
    a->members = std::make_unique<AttrList>(t[2]);
  } else {
    throw nb::value_error(("attribute " + a->name + ": unknown kind " + kind +
                           " (expected i64, str, i32[], i64[] or dict)").c_str());
  }
  return a;
}

AttrList::AttrList(nb::handle seq) {
  for (nb::handle item : seq) items.push_back(decode_attr(item));
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a->name < b->name; });
  for (size_t i = 1; i < items.size(); ++i) {
    if (items[i]->name == items[i - 1]->name) {
      throw nb::value_error(("attribute " + items[i]->name + " given twice").c_str());
    }
  }
}

XLA_FFI_Attrs* AttrList::get() {
  types.clear();
  names.clear();
  values.clear();
  for (auto& a : items) {
    a->name_span = {a->name.data(), a->name.size()};
    types.push_back(a->type);
    names.push_back(&a->name_span);
    values.push_back(a->value());
  }
  attrs = {XLA_FFI_Attrs_STRUCT_SIZE, nullptr, static_cast<int64_t>(items.size()), types.data(),
           names.data(), values.data()};
  return &attrs;
}

}  // namespace

nb::tuple call_cuda_handler(nb::handle args, nb::handle rets, nb::handle attrs, uint64_t stream,
                            nb::object scratch, bool retired) {
  Buffers in(args), out(rets);
  AttrList attributes(attrs);
  Context context{stream, scratch.ptr()};
  XLA_FFI_CallFrame frame;
  std::memset(&frame, 0, sizeof(frame));
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.api = api();
  frame.ctx = reinterpret_cast<decltype(frame.ctx)>(&context);
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args = {XLA_FFI_Args_STRUCT_SIZE, nullptr, static_cast<int64_t>(in.buffers.size()),
                in.arg_types.data(), in.pointers.data()};
  frame.rets = {XLA_FFI_Rets_STRUCT_SIZE, nullptr, static_cast<int64_t>(out.buffers.size()),
                out.ret_types.data(), out.pointers.data()};
  frame.attrs = *attributes.get();

  XLA_FFI_Error* error;
  {
    nb::gil_scoped_release release;
    error = retired ? JaxptxLaunchRetiredV1(&frame) : JaxptxLaunch(&frame);
  }
  if (!error) return nb::make_tuple(0, "");
  Error* e = reinterpret_cast<Error*>(error);
  nb::tuple result = nb::make_tuple(static_cast<int>(e->code), e->message);
  delete e;
  return result;
}

}  // namespace jaxptx
