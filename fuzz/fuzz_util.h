// Helpers shared by the fuzz targets in this folder:
//  - scratch_dir(): a per-process scratch directory (/dev/shm/ar-fuzz-<pid>, removed at exit) for the
//    parsers that take a path;
//  - write_input(): writes the input bytes to a file there;
//  - guarded(): the one rule every target applies: ar::Error is the only acceptable failure of a
//    parser; any other exception is a finding, printed and turned into an abort so that libFuzzer
//    (or the replay driver) reports it with its input.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <typeinfo>
#include <unistd.h>

#include "core/error.h"

namespace ar::fuzz {

inline const std::string& scratch_dir() {
  // Heap-allocated and never freed (still reachable, not a leak), so the exit handler that removes
  // the directory can use it after static destructors have run.
  static const std::string* dir = [] {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path d = base / ("ar-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::atexit([] {
      std::error_code e;
      std::filesystem::remove_all(scratch_dir(), e);
    });
    return new std::string(d.string());
  }();
  return *dir;
}

inline std::string write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

// Writes the input to <scratch>/<name> and returns the path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  return write_file(scratch_dir() + "/" + name, data, size);
}

template <class F>
int guarded(F&& body) {
  try {
    body();
  } catch (const ar::Error&) {
    // the documented outcome for bad input
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: FINDING: exception other than ar::Error (%s): %s\n", typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz: FINDING: non-standard exception\n");
    std::abort();
  }
  return 0;
}

}  // namespace ar::fuzz
