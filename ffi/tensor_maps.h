// TMA descriptors for a launch: the records of a call's `tma` attribute
// (jaxptx/jax/_tma.py documents the layout), encoded by the driver with the
// buffers' device addresses for each call.

#ifndef JAXPTX_FFI_TENSOR_MAPS_H_
#define JAXPTX_FFI_TENSOR_MAPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_driver.h"
#include "xla/ffi/api/ffi.h"

namespace jaxptx::cu {

// int64s per descriptor record in the `tma` attribute.
inline constexpr size_t TMA_RECORD = 26;
inline constexpr int TMA_MAX_RANK = 5;

// One record, as cuTensorMapEncodeTiled takes it (per-dimension arrays
// innermost first; `strides` has rank - 1 entries).
struct TiledMapArgs {
  size_t buffer = 0;
  int dtype = 0;
  uint32_t rank = 0;
  uint64_t dims[TMA_MAX_RANK] = {};
  uint64_t strides[TMA_MAX_RANK - 1] = {};
  uint32_t box[TMA_MAX_RANK] = {};
  uint32_t element_strides[TMA_MAX_RANK] = {};
  int interleave = 0, swizzle = 0, l2_promotion = 0, oob_fill = 0;
};

// Splits the `tma` attribute into records for `num_buffers` buffers.
// Returns an empty string, or what is malformed (not whole records, a
// buffer index out of range, a rank outside 1..5, a negative field).
std::string decode_tensor_maps(xla::ffi::Span<const int64_t> records, size_t num_buffers,
                               std::vector<TiledMapArgs>* out);

// Encodes each record with the address of the buffer it names (inputs,
// then outputs) into `maps`, one per record, in order. Returns an empty
// string, or what is wrong (a malformed attribute, a driver without TMA,
// or the driver's refusal with the descriptor's fields).
std::string encode_tensor_maps(const Driver& d, xla::ffi::Span<const int64_t> records,
                               const std::vector<void*>& buffers, std::vector<TensorMap>* maps);

}  // namespace jaxptx::cu

#endif  // JAXPTX_FFI_TENSOR_MAPS_H_
