// A cache of built values by key, at most `capacity` of them, the least recently used destroyed first.
// What the CUDA backend keeps its cuBLASLt GEMM plans in (kernels/cuda/gemm_plan.h): building one costs
// descriptor creation and a heuristic query, using one costs a lookup.
//
// Keys need operator<. A value is built by the caller's function on a miss; a build that throws leaves
// the cache as it was. The reference `get` returns stays valid until a later `get` evicts that entry (with
// capacity >= 2, the next `get` never evicts the entry just returned). Not thread-safe: one owner (a device
// context, used by one thread at a time, as its stream is).
#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <map>
#include <utility>

namespace ar {

template <class Key, class Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}
  LruCache(const LruCache&) = delete;
  LruCache& operator=(const LruCache&) = delete;

  // The value for k, built by make() (returning a Value) on a miss.
  template <class Make>
  Value& get(const Key& k, Make&& make) {
    if (auto it = index_.find(k); it != index_.end()) {
      ++hits_;
      order_.splice(order_.begin(), order_, it->second);  // most recently used first
      return it->second->second;
    }
    ++misses_;
    std::list<Entry> built;
    built.emplace_back(k, make());  // a throw here changes nothing
    if (order_.size() == capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.splice(order_.begin(), built);
    index_.emplace(k, order_.begin());
    return order_.front().second;
  }

  size_t size() const { return order_.size(); }
  size_t capacity() const { return capacity_; }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  using Entry = std::pair<Key, Value>;
  size_t capacity_;
  std::list<Entry> order_;  // most recently used first
  std::map<Key, typename std::list<Entry>::iterator> index_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace ar
