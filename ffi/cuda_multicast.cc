// Multicast workspaces (cuda_multicast.h): the objects, made once per
// call's identity and devices, and each rank's backing.

#include "cuda_multicast.h"

#include <map>
#include <numeric>
#include <tuple>
#include <utility>

namespace jaxptx::cu {

namespace {

// The workspaces made in this process, by (kernel id, site, axis, axis size,
// peer tensor, byte size, devices and contexts by rank). Process-wide by
// nature: XLA's threads share them.
using Key = std::tuple<int64_t, int64_t, std::string, int64_t, size_t, size_t,
                       std::vector<CUdevice>, std::vector<CUcontext>>;
std::mutex g_mutex;
std::map<Key, std::shared_ptr<Workspace>> g_workspaces;

std::string device_name(CUdevice device) { return "device " + std::to_string(device); }

// `n` rounded up to a multiple of `granule` (at least one granule).
size_t round_up(size_t n, size_t granule) {
  return (n == 0 ? 1 : (n + granule - 1) / granule) * granule;
}

MemAllocationProp physical_on(CUdevice device) {
  MemAllocationProp prop{};
  prop.type = MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Refuses devices without multicast support. Empty when all have it.
std::string check_support(const Driver& d, const WorkspaceRequest& request,
                          const std::string& where, const std::string& axis, bool* refused) {
  for (size_t r = 0; r < request.devices.size(); ++r) {
    int supported = 0;
    CUresult rc = d.cuDeviceGetAttribute(&supported, DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
                                         request.devices[r]);
    if (rc != CUDA_SUCCESS) {
      return where + ": asking " + device_name(request.devices[r]) +
             " for CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED failed: " + describe(d, rc);
    }
    if (!supported) {
      std::string tensors;
      for (size_t k : request.peers) tensors += (tensors.empty() ? "" : ", ") + std::to_string(k);
      *refused = true;
      return where + " takes the multicast address (multimem_ptr) of peer tensor(s) " + tensors +
             " (in peers order), and " + device_name(request.devices[r]) + " (rank " +
             std::to_string(r) + " of " + axis +
             ") has no multicast support (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED is 0: "
             "multicast objects need sm_90+ GPUs joined by NVSwitch): use peer_ptr on these "
             "GPUs, or run the kernel on the CPU, where multimem runs on the emulator";
    }
  }
  return std::string();
}

// The bytes of a workspace for `nbytes`: a multiple of the object's minimum
// granularity and of every device's allocation granularity.
std::string workspace_size(const Driver& d, const WorkspaceRequest& request, size_t nbytes,
                           const std::string& where, size_t* size, size_t* alignment) {
  MulticastObjectProp prop{};
  prop.numDevices = static_cast<unsigned int>(request.devices.size());
  prop.size = nbytes == 0 ? 1 : nbytes;
  size_t granule = 0;
  CUresult rc = d.cuMulticastGetGranularity(&granule, &prop, MULTICAST_GRANULARITY_MINIMUM);
  if (rc != CUDA_SUCCESS || granule == 0) {
    return where + ": cuMulticastGetGranularity failed: " +
           (rc != CUDA_SUCCESS ? describe(d, rc) : std::string("it gave 0 bytes"));
  }
  for (CUdevice device : request.devices) {
    MemAllocationProp physical = physical_on(device);
    size_t own = 0;
    rc = d.cuMemGetAllocationGranularity(&own, &physical, MEM_ALLOC_GRANULARITY_MINIMUM);
    if (rc != CUDA_SUCCESS || own == 0) {
      return where + ": cuMemGetAllocationGranularity(" + device_name(device) + ") failed: " +
             (rc != CUDA_SUCCESS ? describe(d, rc) : std::string("it gave 0 bytes"));
    }
    granule = std::lcm(granule, own);
  }
  *size = round_up(nbytes, granule);
  *alignment = granule;
  return std::string();
}

// A new object of `size` bytes over the request's devices.
std::string make_workspace(const Driver& d, const WorkspaceRequest& request, size_t peer,
                           size_t size, size_t granule, const std::string& where,
                           std::shared_ptr<Workspace>* out) {
  auto w = std::make_shared<Workspace>();
  w->size = size;
  w->granule = granule;
  w->devices = request.devices;
  w->ranks.resize(request.devices.size());
  MulticastObjectProp prop{};
  prop.numDevices = static_cast<unsigned int>(request.devices.size());
  prop.size = size;
  const std::string what = "the multicast object of peer tensor " + std::to_string(peer) + " (" +
                           std::to_string(size) + " bytes)";
  CUresult rc = d.cuMulticastCreate(&w->handle, &prop);
  if (rc != CUDA_SUCCESS) return where + ": creating " + what + " failed: " + describe(d, rc);
  for (CUdevice device : request.devices) {
    rc = d.cuMulticastAddDevice(w->handle, device);
    if (rc != CUDA_SUCCESS) {
      return where + ": adding " + device_name(device) + " to " + what + " failed: " +
             describe(d, rc);
    }
  }
  *out = std::move(w);
  return std::string();
}

// Reserves `size` bytes of addresses aligned to `granule`, maps `handle`
// there and lets the devices of `access` read and write them.
std::string map_range(const Driver& d, CUmemGenericAllocationHandle handle, size_t size,
                      size_t granule, const std::vector<CUdevice>& access, CUdeviceptr* address) {
  CUdeviceptr at = 0;
  CUresult rc = d.cuMemAddressReserve(&at, size, granule, 0, 0);
  if (rc != CUDA_SUCCESS) return "cuMemAddressReserve failed: " + describe(d, rc);
  rc = d.cuMemMap(at, size, 0, handle, 0);
  if (rc != CUDA_SUCCESS) return "cuMemMap failed: " + describe(d, rc);
  std::vector<MemAccessDesc> descs;
  for (CUdevice device : access) {
    MemAccessDesc desc{};
    desc.location.type = MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = device;
    desc.flags = MEM_ACCESS_FLAGS_PROT_READWRITE;
    descs.push_back(desc);
  }
  rc = d.cuMemSetAccess(at, size, descs.data(), descs.size());
  if (rc != CUDA_SUCCESS) return "cuMemSetAccess failed: " + describe(d, rc);
  *address = at;
  return std::string();
}

}  // namespace

const char* missing_multicast_entry_point(const Driver& d) {
  if (!d.cuDeviceGetAttribute) return "cuDeviceGetAttribute";
  if (!d.cuMulticastGetGranularity) return "cuMulticastGetGranularity";
  if (!d.cuMulticastCreate) return "cuMulticastCreate";
  if (!d.cuMulticastAddDevice) return "cuMulticastAddDevice";
  if (!d.cuMulticastBindMem) return "cuMulticastBindMem";
  if (!d.cuMemGetAllocationGranularity) return "cuMemGetAllocationGranularity";
  if (!d.cuMemCreate) return "cuMemCreate";
  if (!d.cuMemAddressReserve) return "cuMemAddressReserve";
  if (!d.cuMemMap) return "cuMemMap";
  if (!d.cuMemSetAccess) return "cuMemSetAccess";
  if (!d.cuMemcpyDtoDAsync_v2) return "cuMemcpyDtoDAsync_v2";
  return nullptr;
}

std::string find_workspaces(const Driver& d, const WorkspaceRequest& request,
                            const std::string& where, const std::string& axis,
                            std::vector<std::shared_ptr<Workspace>>* out, bool* refused) {
  std::lock_guard<std::mutex> lock(g_mutex);
  bool checked = false;
  out->clear();
  for (size_t i = 0; i < request.peers.size(); ++i) {
    const Key key{request.kernel_id, request.site, request.axis_name, request.axis_size,
                  request.peers[i], request.nbytes[i], request.devices, request.contexts};
    std::shared_ptr<Workspace>& slot = g_workspaces[key];
    if (!slot) {
      std::string bad;
      if (!checked) bad = check_support(d, request, where, axis, refused);
      checked = true;
      size_t size = 0, granule = 0;
      if (bad.empty()) bad = workspace_size(d, request, request.nbytes[i], where, &size, &granule);
      if (bad.empty()) {
        bad = make_workspace(d, request, request.peers[i], size, granule, where, &slot);
      }
      if (!bad.empty()) {
        g_workspaces.erase(key);
        return bad;
      }
    }
    out->push_back(slot);
  }
  return std::string();
}

std::string back_workspace(const Driver& d, Workspace& w, uint32_t rank, size_t peer,
                           const std::string& where) {
  std::lock_guard<std::mutex> lock(w.mutex);
  Backing& b = w.ranks[rank];
  const CUdevice device = w.devices[rank];
  const std::string what = "peer tensor " + std::to_string(peer) + "'s multicast workspace (" +
                           std::to_string(w.size) + " bytes) on " + device_name(device);
  if (!b.memory) {
    MemAllocationProp prop = physical_on(device);
    CUresult rc = d.cuMemCreate(&b.memory, w.size, &prop, 0);
    if (rc != CUDA_SUCCESS) {
      b.memory = 0;
      return where + ": allocating " + what + " (cuMemCreate) failed: " + describe(d, rc);
    }
  }
  if (!b.bound) {
    CUresult rc = d.cuMulticastBindMem(w.handle, 0, b.memory, 0, w.size, 0);
    if (rc != CUDA_SUCCESS) {
      return where + ": binding " + what + " to its multicast object failed: " + describe(d, rc);
    }
    b.bound = true;
  }
  if (!b.unicast) {
    // Every rank's device: its peers reach this copy through their tables.
    std::string bad = map_range(d, b.memory, w.size, w.granule, w.devices, &b.unicast);
    if (!bad.empty()) return where + ": mapping " + what + ": " + bad;
  }
  if (!b.multicast) {
    std::string bad = map_range(d, w.handle, w.size, w.granule, {device}, &b.multicast);
    if (!bad.empty()) {
      return where + ": mapping the multicast object of peer tensor " + std::to_string(peer) +
             " for " + device_name(device) + ": " + bad;
    }
  }
  return std::string();
}

}  // namespace jaxptx::cu
