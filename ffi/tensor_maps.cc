// Decoding and encoding the TMA descriptors of a launch (see tensor_maps.h).

#include "tensor_maps.h"

#include <sstream>

namespace jaxptx::cu {

namespace {

// Field offsets in a record (jaxptx/jax/_tma.py).
enum Field : size_t {
  BUFFER = 0, DTYPE = 1, RANK = 2, SWIZZLE = 3, DIMS = 4, STRIDES = 9, BOX = 13,
  ELEMENT_STRIDES = 18, INTERLEAVE = 23, L2_PROMOTION = 24, OOB_FILL = 25,
};

std::string describe(const TiledMapArgs& a) {
  std::ostringstream out;
  out << "buffer " << a.buffer << ", data type " << a.dtype << ", rank " << a.rank
      << ", swizzle " << a.swizzle << ", dims {";
  for (uint32_t k = 0; k < a.rank; ++k) out << (k ? ", " : "") << a.dims[k];
  out << "}, box {";
  for (uint32_t k = 0; k < a.rank; ++k) out << (k ? ", " : "") << a.box[k];
  out << "}, strides {";
  for (uint32_t k = 0; k + 1 < a.rank; ++k) out << (k ? ", " : "") << a.strides[k];
  out << "}";
  return out.str();
}

}  // namespace

std::string decode_tensor_maps(xla::ffi::Span<const int64_t> records, size_t num_buffers,
                               std::vector<TiledMapArgs>* out) {
  out->clear();
  if (records.size() % TMA_RECORD != 0) {
    return "the tma attribute has " + std::to_string(records.size()) +
           " entries, not whole records of " + std::to_string(TMA_RECORD);
  }
  for (size_t i = 0; i < records.size() / TMA_RECORD; ++i) {
    const int64_t* r = records.begin() + i * TMA_RECORD;
    bool ok = r[BUFFER] >= 0 && r[BUFFER] < static_cast<int64_t>(num_buffers) && r[RANK] >= 1 &&
              r[RANK] <= TMA_MAX_RANK;
    for (size_t f = 0; f < TMA_RECORD; ++f) ok = ok && r[f] >= 0;
    if (!ok) {
      return "TMA descriptor " + std::to_string(i) + " is malformed (buffer " +
             std::to_string(r[BUFFER]) + " of " + std::to_string(num_buffers) + ", rank " +
             std::to_string(r[RANK]) + ", or a negative field)";
    }
    TiledMapArgs a;
    a.buffer = static_cast<size_t>(r[BUFFER]);
    a.dtype = static_cast<int>(r[DTYPE]);
    a.rank = static_cast<uint32_t>(r[RANK]);
    for (uint32_t k = 0; k < a.rank; ++k) {
      a.dims[k] = static_cast<uint64_t>(r[DIMS + k]);
      a.box[k] = static_cast<uint32_t>(r[BOX + k]);
      a.element_strides[k] = static_cast<uint32_t>(r[ELEMENT_STRIDES + k]);
      if (k + 1 < a.rank) a.strides[k] = static_cast<uint64_t>(r[STRIDES + k]);
    }
    a.interleave = static_cast<int>(r[INTERLEAVE]);
    a.swizzle = static_cast<int>(r[SWIZZLE]);
    a.l2_promotion = static_cast<int>(r[L2_PROMOTION]);
    a.oob_fill = static_cast<int>(r[OOB_FILL]);
    out->push_back(a);
  }
  return std::string();
}

std::string encode_tensor_maps(const Driver& d, xla::ffi::Span<const int64_t> records,
                               const std::vector<void*>& buffers, std::vector<TensorMap>* maps) {
  std::vector<TiledMapArgs> args;
  std::string bad = decode_tensor_maps(records, buffers.size(), &args);
  if (!bad.empty()) return bad;
  maps->assign(args.size(), TensorMap{});
  if (args.empty()) return std::string();
  if (!d.cuTensorMapEncodeTiled) {
    return "the kernel uses TMA descriptors, but this driver has no cuTensorMapEncodeTiled "
           "(CUDA 12 or newer is needed)";
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const TiledMapArgs& a = args[i];
    void* address = buffers[a.buffer];
    CUresult rc = d.cuTensorMapEncodeTiled(&(*maps)[i], a.dtype, a.rank, address, a.dims,
                                           a.strides, a.box, a.element_strides, a.interleave,
                                           a.swizzle, a.l2_promotion, a.oob_fill);
    if (rc != CUDA_SUCCESS) {
      return "cuTensorMapEncodeTiled refused TMA descriptor " + std::to_string(i) + " (" +
             describe(a) + ", address " + std::to_string(reinterpret_cast<uintptr_t>(address)) +
             "): CUresult " + std::to_string(rc);
    }
  }
  return std::string();
}

}  // namespace jaxptx::cu
