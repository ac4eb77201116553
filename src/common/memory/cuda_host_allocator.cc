#include "src/common/memory/cuda_host_allocator.h"

#include <dlfcn.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace heterodl {
namespace {

// The few CUDA runtime entry points used, declared by hand because the point
// is to need no CUDA headers: their C ABI (an int error code, pointers) has
// been stable since CUDA 4.
using GetDeviceCountFn = int (*)(int* count);
using SetDeviceFn = int (*)(int device);
using HostAllocFn = int (*)(void** pointer, size_t bytes, unsigned int flags);
using FreeHostFn = int (*)(void* pointer);
using GetErrorStringFn = const char* (*)(int error);
constexpr unsigned int kCudaHostAllocPortable = 1;

// Newest first: a process that already loaded one (torch did) gets that one.
constexpr const char* kRuntimeNames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                         "libcudart.so"};

struct CudaRuntime {
  SetDeviceFn set_device = nullptr;
  HostAllocFn host_alloc = nullptr;
  FreeHostFn free_host = nullptr;
};

void* OpenRuntime(std::string& tried) {
  for (int flags : {RTLD_NOW | RTLD_NOLOAD, RTLD_NOW | RTLD_LOCAL}) {
    for (const char* name : kRuntimeNames) {
      if (void* handle = dlopen(name, flags)) {
        return handle;
      }
    }
  }
  tried = absl::StrJoin(kRuntimeNames, ", ");
  return nullptr;
}

}  // namespace

absl::StatusOr<HostAllocator> CudaHostAllocator(int device) {
  std::string tried;
  void* handle = OpenRuntime(tried);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("pinned memory needs the CUDA runtime, and none could be loaded (tried ",
                     tried, "; import torch first, or put libcudart on LD_LIBRARY_PATH)"));
  }
  auto count_devices = reinterpret_cast<GetDeviceCountFn>(dlsym(handle, "cudaGetDeviceCount"));
  auto error_string = reinterpret_cast<GetErrorStringFn>(dlsym(handle, "cudaGetErrorString"));
  auto runtime = std::make_shared<CudaRuntime>();
  runtime->set_device = reinterpret_cast<SetDeviceFn>(dlsym(handle, "cudaSetDevice"));
  runtime->host_alloc = reinterpret_cast<HostAllocFn>(dlsym(handle, "cudaHostAlloc"));
  runtime->free_host = reinterpret_cast<FreeHostFn>(dlsym(handle, "cudaFreeHost"));
  if (count_devices == nullptr || error_string == nullptr || runtime->set_device == nullptr ||
      runtime->host_alloc == nullptr || runtime->free_host == nullptr) {
    return absl::FailedPreconditionError(
        "the CUDA runtime loaded lacks cudaGetDeviceCount, cudaSetDevice, cudaHostAlloc or "
        "cudaFreeHost");
  }
  int devices = 0;
  if (const int error = count_devices(&devices); error != 0 || devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("pinned memory needs a CUDA device, and the CUDA runtime sees none",
                     error != 0 ? absl::StrCat(" (", error_string(error), ")") : std::string()));
  }
  if (device < 0 || device >= devices) {
    return absl::FailedPreconditionError(absl::StrCat("pinned memory for CUDA device ", device,
                                                      ", and the CUDA runtime sees ", devices));
  }
  return HostAllocator{[runtime, device](size_t bytes) -> void* {
                         // The calling thread is one of the loader's: its current device is
                         // ours to set, and cudaHostAlloc would otherwise make a context on
                         // device 0 in every rank's process.
                         if (runtime->set_device(device) != 0) {
                           return nullptr;
                         }
                         void* pointer = nullptr;
                         if (runtime->host_alloc(&pointer, bytes, kCudaHostAllocPortable) != 0) {
                           return nullptr;
                         }
                         return pointer;
                       },
                       [runtime](void* pointer) { runtime->free_host(pointer); }};
}

}  // namespace heterodl
