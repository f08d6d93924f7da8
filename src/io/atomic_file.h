// Atomic outputs: a file or directory appears under its final name complete, or not at all.
// AtomicFile writes an exclusively created "<path>.tmp.XXXXXX", fsyncs and renames on commit().
// AtomicDir checks its OutputSpec (io/output_guard.h) before creating anything, writes into a sibling
// temporary "<name>.autoround-tmp.XXXXXX" (or "<name>.partial" when resumable) that carries our marker
// and an exclusive lock, and on commit() swaps it into place atomically. Destructors without commit()
// remove the temporary (a resumable one is kept); so do SIGINT/SIGTERM/SIGHUP (core/interrupt.h).
// A temporary left by a killed run is recognized by its marker and free lock, and removed by the next
// run on the same output; one whose lock is held belongs to a live run, which stops this one.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

#include "core/interrupt.h"
#include "io/output_guard.h"

namespace ar {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  void commit();

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
  TempRegistration reg_;
};

void write_file_atomic(const std::string& path, const std::string& content);

class AtomicDir {
 public:
  explicit AtomicDir(const OutputSpec& spec);
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;
  const std::string& path() const { return path_; }  // canonical final path
  const std::string& tmp() const { return tmp_; }    // write files here
  std::string file(const std::string& name) const { return tmp_ + "/" + name; }
  bool resumed() const { return resumed_; }  // resumable: the temporary existed (holds an earlier state)
  const std::string& note() const { return note_; }  // what was found and cleaned up or kept, if anything
  // Resumable: the temporary now holds state worth keeping when the run fails or is interrupted (until
  // then, a .partial this run created is removed like any temporary).
  void keep();
  void commit();

 private:
  void create_temp();
  void clean_stale();
  std::string path_, tmp_, note_;
  OutputSpec spec_;
  int lock_fd_ = -1;
  bool committed_ = false, resumed_ = false, keep_ = false;
  TempRegistration reg_;
};

}  // namespace ar
