#include "parallel/devices.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

namespace ar::parallel {

namespace {
// "0-3,8,10-11" -> {0,1,2,3,8,10,11}
std::vector<int> parse_cpulist(const std::string& s) {
  std::vector<int> r;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty() || part == "\n") continue;
    int a = 0, b = 0;
    if (std::sscanf(part.c_str(), "%d-%d", &a, &b) == 2) {
      for (int c = a; c <= b; ++c) r.push_back(c);
    } else if (std::sscanf(part.c_str(), "%d", &a) == 1) {
      r.push_back(a);
    }
  }
  return r;
}

std::string ranges_str(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(v[i]);
    if (j > i) s.append("-").append(std::to_string(v[j]));
    i = j + 1;
  }
  return s;
}
}  // namespace

int CpuTopology::cores() const {
  int n = 0;
  for (auto& c : nodes) n += int(c.size());
  return n;
}

CpuTopology CpuTopology::detect() {
  CpuTopology t;
  cpu_set_t set;
  CPU_ZERO(&set);
  std::set<int> allowed;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) allowed.insert(c);
  for (int node = 0; node < 1024; ++node) {
    std::ifstream f("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist");
    if (!f) {
      if (node > 0 || !t.nodes.empty()) break;
      continue;
    }
    std::string line;
    std::getline(f, line);
    std::vector<int> cpus;
    for (int c : parse_cpulist(line))
      if (allowed.empty() || allowed.count(c)) cpus.push_back(c);
    if (!cpus.empty()) t.nodes.push_back(cpus);
  }
  if (t.nodes.empty()) t.nodes.push_back(std::vector<int>(allowed.begin(), allowed.end()));
  if (t.nodes[0].empty()) t.nodes[0].push_back(0);
  std::ifstream mi("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (mi >> key >> kb >> unit)
    if (key == "MemAvailable:") t.mem_available = kb * 1024;
  return t;
}

std::string DeviceSlot::str() const {
  std::string s = device.str();
  if (device.kind == DeviceKind::CPU) {
    s.append(" (cores ").append(ranges_str(cores));
    if (numa_node >= 0) s.append(", node ").append(std::to_string(numa_node));
    if (shares_cores) s.append(", shared");
    s += ')';
  }
  return s;
}

std::vector<Device> parse_device_list(const std::string& spec) {
  std::vector<Device> r;
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    Device d = Device::parse(part);
    if (std::find(r.begin(), r.end(), d) != r.end())
      fail(ErrorKind::InvalidInput, "--devices lists " + d.str() + " twice");
    r.push_back(d);
  }
  return r;
}

std::vector<DeviceSlot> cpu_device_slots(const CpuTopology& topo, const std::vector<Device>& wanted_in) {
  const int N = int(topo.nodes.size());
  std::vector<Device> wanted = wanted_in;
  if (wanted.empty())
    for (int i = 0; i < N; ++i) wanted.push_back({DeviceKind::CPU, i});
  int K = 0;
  for (const Device& d : wanted) {
    if (d.kind != DeviceKind::CPU)
      fail(ErrorKind::Unsupported, "device " + d.str() + ": the data-parallel lane runs on CPU devices only (one GPU "
                                   "tunes with --device cuda:N where the build has the CUDA backend: docs/cuda.md)");
    K = std::max(K, d.index + 1);
  }
  std::vector<DeviceSlot> all(static_cast<size_t>(K));
  if (K >= N) {
    for (int node = 0; node < N; ++node) {
      const int d0 = K * node / N, d1 = K * (node + 1) / N, nd = d1 - d0;
      const auto& cpus = topo.nodes[size_t(node)];
      const int nc = int(cpus.size());
      for (int j = 0; j < nd; ++j) {
        DeviceSlot& s = all[size_t(d0 + j)];
        s.numa_node = node;
        if (nc >= nd) {
          for (int c = nc * j / nd; c < nc * (j + 1) / nd; ++c) s.cores.push_back(cpus[size_t(c)]);
        } else {
          s.cores.push_back(cpus[size_t(j % nc)]);
          s.shares_cores = true;
        }
      }
    }
  } else {
    for (int d = 0; d < K; ++d) {
      DeviceSlot& s = all[size_t(d)];
      s.numa_node = N * d / K;
      for (int node = N * d / K; node < N * (d + 1) / K; ++node)
        s.cores.insert(s.cores.end(), topo.nodes[size_t(node)].begin(), topo.nodes[size_t(node)].end());
    }
  }
  const double total = std::max(1, topo.cores());
  std::vector<DeviceSlot> r;
  for (const Device& d : wanted) {
    DeviceSlot s = all[size_t(d.index)];
    s.device = d;
    s.free_bytes = size_t(double(topo.mem_available) * double(s.cores.size()) / total);
    if (s.shares_cores) s.free_bytes = topo.mem_available / size_t(K);
    r.push_back(std::move(s));
  }
  return r;
}

}  // namespace ar::parallel
