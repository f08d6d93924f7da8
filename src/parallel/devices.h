// The devices of the data-parallel lane. A CUDA device is a GPU; a CPU device is a disjoint set of
// cores of this host (NUMA-node aware), with its own pinned thread pool and single-threaded BLAS per
// pool thread, so replicas never fight over cores or over BLAS's global thread pool.
// Partition of K CPU devices (`cpu:0..cpu:K-1`, K = highest listed index + 1) over the host:
//   K >= nodes: node i hosts devices [K*i/N, K*(i+1)/N) and splits its cores among them contiguously;
//   K <  nodes: device d takes every core of nodes [N*d/K, N*(d+1)/K).
//   A node with fewer cores than devices hands out cores round-robin (shares_cores, logged).
// Free memory of a CPU device is the host's available memory in proportion to its cores.
// The default (`--devices` empty) is every visible device: one CPU device per NUMA node.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/context.h"

namespace ar::parallel {

struct CpuTopology {
  std::vector<std::vector<int>> nodes;  // usable CPUs (this process's affinity) per NUMA node
  size_t mem_available = 0;             // bytes
  static CpuTopology detect();          // /sys/devices/system/node, sched_getaffinity, /proc/meminfo
  int cores() const;
};

struct DeviceSlot {
  Device device;
  std::vector<int> cores;  // CPU devices: the cores its pool is pinned to
  int numa_node = -1;
  bool shares_cores = false;
  size_t free_bytes = 0;
  std::string str() const;  // "cpu:1 (cores 2-3, node 0)"
};

// "cpu:0,cpu:1" -> devices; "" -> none (meaning: the default). Repeated devices are an error.
std::vector<Device> parse_device_list(const std::string& spec);

// The slots for `wanted` (empty: one CPU device per NUMA node). CUDA devices are refused here in a
// CPU-only build with a message naming the device.
std::vector<DeviceSlot> cpu_device_slots(const CpuTopology& topo, const std::vector<Device>& wanted);

}  // namespace ar::parallel
