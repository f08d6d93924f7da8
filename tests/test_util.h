// Shared helpers for tests: seeded random fills, finite differences, norm-based comparisons.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace ar::test {

// The message of the ar::Error that f throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A float's bit pattern and back (bit-exact comparisons, every class of value).
inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <class T>
std::vector<T> randn(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, scale);
  std::vector<T> v(n);
  for (auto& x : v) x = T(nd(rng));
  return v;
}

template <class A, class B>
std::vector<A> cast(const std::vector<B>& v) {
  return std::vector<A>(v.begin(), v.end());
}

// Central differences of loss() w.r.t. every element of p (or an evenly spaced sample of `max_checks`),
// compared with the analytic gradient: |fd - an| <= tol * (1 + |an|).
inline void expect_grad_matches_fd(const std::string& what, std::vector<double>& p, const std::vector<double>& an,
                                   const std::function<double()>& loss, double tol = 1e-6, size_t max_checks = 64) {
  ASSERT_EQ(p.size(), an.size()) << what;
  const size_t n = p.size(), step = std::max<size_t>(1, n / max_checks);
  for (size_t i = 0; i < n; i += step) {
    const double h = 1e-6 * std::max(1.0, std::abs(p[i]));
    double x0 = p[i];
    p[i] = x0 + h;
    double lp = loss();
    p[i] = x0 - h;
    double lm = loss();
    p[i] = x0;
    double fd = (lp - lm) / (2 * h);
    EXPECT_NEAR(fd, an[i], tol * (1.0 + std::abs(an[i]))) << what << " element " << i;
  }
}

// Relative L2 error ||a - b|| / max(||b||, tiny).
template <class A, class B>
double rel_err(const A* a, const B* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// A fresh (removed if present) path under the temp directory, unique per process: "ar_test_<name>_<pid>".
std::string temp_path(const std::string& name);

// A directory at temp_path(name), created now and removed with everything in it at scope exit.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
  std::string write(const std::string& name, const std::string& bytes) const;  // returns file(name)
};

// Whether some entry of `v` contains `what` (notes, refusal reasons).
bool any_contains(const std::vector<std::string>& v, const std::string& what);

// Path of the shared fixtures folder (../shared/fixtures relative to the source tree), or "" if absent.
std::string fixtures_dir();

#define AR_REQUIRE_FIXTURES(dir)                                                               \
  std::string dir = ::ar::test::fixtures_dir();                                                \
  if (dir.empty()) GTEST_SKIP() << "fixtures folder ../shared/fixtures not found; set AR_FIXTURES"

}  // namespace ar::test
