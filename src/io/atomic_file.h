// Atomic outputs: a file or directory appears under its final name complete, or not at all.
// AtomicFile writes "<path>.tmp.<pid>", fsyncs and renames on commit(); AtomicDir does the same for a
// directory. Destructors without commit() remove the temporary, so failures leave nothing behind.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

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
};

void write_file_atomic(const std::string& path, const std::string& content);

class AtomicDir {
 public:
  // Refuses an existing `path` unless overwrite is set (then it is replaced on commit).
  AtomicDir(const std::string& path, bool overwrite);
  // Resumable variant: the temporary is "<path>.partial", kept across failures and reused when it
  // exists (the caller validates its contents).
  AtomicDir(const std::string& path, bool overwrite, bool resumable);
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;
  const std::string& tmp() const { return tmp_; }  // write files here
  std::string file(const std::string& name) const { return tmp_ + "/" + name; }
  void commit();

 private:
  std::string path_, tmp_;
  bool overwrite_, committed_ = false, resumable_ = false;
};

}  // namespace ar
