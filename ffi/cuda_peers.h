// Kernels that name their peers, on GPUs: the CUDA handler's half of a call
// of a kernel declared with `peers=` (jaxptx/dsl/_peers.py,
// jaxptx/jax/_peers.py).
//
// Such a call carries a `peers` attribute (a dictionary: axis_name,
// axis_size, buffers, multimem, site) and its rank on the mesh axis as its
// last operand (a u32 on the device). XLA runs each device's thunk on a
// thread of its own, in one process: the handler of each device reads its
// rank, joins a host rendezvous keyed by (kernel id, site, axis, size) and
// registers its context and its peer tensors' addresses; once every rank
// has arrived, each enables peer access from its context to every other
// (cuDeviceCanAccessPeer, then cuCtxEnablePeerAccess, once per pair per
// process), writes its peer table (entry k*W + r: rank r's copy of peer
// tensor k; entry K*W + k: tensor k's multicast address, or 0) into a
// buffer of its own with cuMemcpyHtoDAsync, and synchronises its stream, so
// that every rank's buffers (private copies included) are in place before
// any peer's kernel may write them. Only when every rank is so ready does
// any launch: a rank that fails before then makes every rank fail, since a
// kernel launched without its peers would wait on their flags for ever.
// Then each launches on its own stream; the kernels synchronise among
// themselves through their flags.
//
// A call whose kernel takes the multicast address of a peer tensor (its
// `multimem` bit) meets once more before its tables are written: once all
// ranks have arrived, one finds or makes the tensor's multicast workspace
// (cuda_multicast.h), each rank binds and maps its share, and the ranks wait
// until every share is in place. The tensor's table entries are then the
// ranks' unicast views of the workspace (entry K*W + k: this rank's mapping
// of the multicast object), the kernel's own pointer to it is its unicast
// view, XLA's buffer is copied in before the launch (an input) and out
// after it (an output), on the call's stream. Devices without multicast
// support are refused (every rank fails with the reason), and so is a driver
// without the entry points (before any rank meets).
//
// A rank whose peers do not all arrive within $JAXPTX_PEER_TIMEOUT seconds
// (default 60, as on the CPU) fails with an error naming the axis and the
// ranks that never came. Single-process multi-GPU is the supported case: a
// call whose axis has more devices than this process has GPUs
// (cuDeviceGetCount) is refused as multi-process; a multi-process mesh
// that fits in one host's GPU count shows as that timeout, whose message
// says so.
//
// Peer access here is cuCtxEnablePeerAccess, which covers memory from
// cuMemAlloc: XLA's default (BFC) allocator. Buffers from a stream-ordered
// pool (XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async) would need
// cuMemPoolSetAccess too, which this does not do.

#ifndef JAXPTX_FFI_CUDA_PEERS_H_
#define JAXPTX_FFI_CUDA_PEERS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda_driver.h"
#include "xla/ffi/api/ffi.h"

namespace jaxptx::cu {

// The `peers` attribute of a call.
struct PeerCall {
  std::string axis_name;
  int64_t axis_size = 0;
  std::vector<int64_t> buffers;  // each peer tensor's index among the kernel's tensors
  int64_t multimem = 0;          // bit k: the kernel takes peer tensor k's multicast address
  int64_t site = 0;              // which of the program's peer calls this is
};

// Decodes the `peers` attribute for a kernel with `n_tensors` tensors:
// exactly its five members, an axis size of at least 1, and buffers that
// are distinct tensor indices. Empty when it is one, else why.
std::string decode_peers(const xla::ffi::Dictionary& attr, size_t n_tensors, PeerCall* out);

// Checks that `declared` (the kernel's parameter sizes) ends with the two
// hidden parameters of a kernel with peers (.u32 jaxptx_rank, .u64
// jaxptx_peers) and sets `own` to the parameters before them. Empty when it
// does, else why.
std::string split_hidden_params(const std::vector<int64_t>& declared, std::vector<int64_t>* own);

// What one rank brings to a launch of a kernel with peers. Its context is
// current on the calling thread.
struct PeerRank {
  int64_t kernel_id;
  std::string entry;                  // the kernel's name, for messages
  CUcontext ctx;
  CUstream stream;
  const void* rank_buffer;            // the rank operand (4 bytes on the device)
  std::vector<void*> tensors;         // the kernel's tensor addresses, as it gets them
  std::vector<size_t> nbytes;         // each tensor's bytes
  size_t n_in = 0;                    // the first n_in tensors are inputs, the rest outputs
};

// A copy the launch of one rank owes XLA after it: a multicast workspace
// back into an output's buffer.
struct CopyOut {
  CUdeviceptr dst = 0, src = 0;
  size_t nbytes = 0;
};

// What the launch of one rank takes: its rank and its peer table's address;
// the tensors whose pointers become a multicast workspace's unicast view
// (tensor index, address), and the copies to make after the launch.
struct PeerParams {
  uint32_t rank = 0;
  CUdeviceptr table = 0;
  std::vector<std::pair<size_t, CUdeviceptr>> redirect;
  std::vector<CopyOut> copy_out;
};

// Meets the other ranks of `call` and readies this one's launch (above):
// on success every rank's table exists and its stream is synchronised, and
// the caller launches at once. The calling thread waits (holding no lock
// or GIL) for at most $JAXPTX_PEER_TIMEOUT seconds per phase.
xla::ffi::Error meet_peers(const Driver& d, const PeerCall& call, const PeerRank& me,
                           PeerParams* out);

}  // namespace jaxptx::cu

#endif  // JAXPTX_FFI_CUDA_PEERS_H_
