// Multicast workspaces: the memory behind `x.multimem_ptr` on GPUs, for a
// call of a kernel with peers (cuda_peers.h) whose `multimem` mask names
// peer tensor x.
//
// XLA's buffers come from cuMemAlloc and cannot be bound to a multicast
// object (cuMulticastBindMem takes memory from cuMemCreate), so each such
// tensor gets a workspace, made once every rank of the call has arrived and
// cached for later calls by (kernel id, site, axis, axis size, tensor, byte
// size, the ranks' devices and contexts):
//
// * one rank (whichever comes first) checks that every device has
//   CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, rounds the tensor's size up to
//   the multicast and allocation granularities (their minimums), creates the
//   object (cuMulticastCreate) and adds every rank's device to it
//   (cuMulticastAddDevice), all before any memory is bound, as the driver
//   requires;
// * then each rank, with its own context current, creates physical memory on
//   its device (cuMemCreate), binds it to the object (cuMulticastBindMem),
//   maps it into a range of its own (cuMemAddressReserve, cuMemMap) that
//   every rank's device may read and write (cuMemSetAccess): the unicast
//   view, which the kernel gets as its pointer to the tensor and its peers
//   get in their peer tables; and maps the object itself into another range
//   that its device may access: the multicast address of its table.
//
// The handler copies the symmetric tensor from XLA's buffer into the
// unicast view before the launch and back after it where XLA's buffer is an
// output (cuda_launch.cc), on the call's stream. A workspace lives as long
// as the process (as the peer tables do); a failure part-way leaves what was
// made so far to a later call's retry.

#ifndef JAXPTX_FFI_CUDA_MULTICAST_H_
#define JAXPTX_FFI_CUDA_MULTICAST_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_driver.h"

namespace jaxptx::cu {

// One rank's share of a workspace: its device's memory, bound to the
// object, and its two mappings (0 until made).
struct Backing {
  CUmemGenericAllocationHandle memory = 0;
  bool bound = false;
  CUdeviceptr unicast = 0;
  CUdeviceptr multicast = 0;
};

// A multicast object over the devices of a call's ranks, and each rank's
// backing. `ranks[r]` is set up by rank r's handler, under `mutex`.
struct Workspace {
  size_t size = 0;          // bytes of the object and of each device's memory
  size_t granule = 0;       // what its sizes and mappings are multiples of
  CUmemGenericAllocationHandle handle = 0;
  std::vector<CUdevice> devices;   // by rank
  std::mutex mutex;
  std::vector<Backing> ranks;      // by rank
};

// Which workspaces a call needs: the call's identity, and per peer tensor
// in its multimem mask, its place among the peers and its byte size.
struct WorkspaceRequest {
  int64_t kernel_id = 0;
  int64_t site = 0;
  std::string axis_name;
  int64_t axis_size = 0;
  std::vector<size_t> peers;       // indices into the call's peer tensors
  std::vector<size_t> nbytes;      // each one's bytes
  std::vector<CUdevice> devices;   // the ranks' devices, by rank
  std::vector<CUcontext> contexts; // ... and contexts
};

// The first entry point a call with multicast addresses needs and the
// driver lacks, or nullptr.
const char* missing_multicast_entry_point(const Driver& d);

// Finds each requested workspace in the cache, or makes it (the object and
// its devices; not the ranks' backings). `where` starts every message;
// `axis` names the mesh axis in them. Empty when done, else why; `refused`
// is set when the devices cannot run multicast at all.
std::string find_workspaces(const Driver& d, const WorkspaceRequest& request,
                            const std::string& where, const std::string& axis,
                            std::vector<std::shared_ptr<Workspace>>* out, bool* refused);

// Sets up rank `rank`'s backing of `w` (its context current) where a
// previous call has not. Empty when done, else why.
std::string back_workspace(const Driver& d, Workspace& w, uint32_t rank, size_t peer,
                           const std::string& where);

}  // namespace jaxptx::cu

#endif  // JAXPTX_FFI_CUDA_MULTICAST_H_
