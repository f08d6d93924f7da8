// Streaming text documents for calibration and evaluation. A source is a plain-text file, a JSONL
// file (one JSON object per line, the document in `field`), or a directory of such files (sorted by
// name, recursively; .txt/.text/.md read as plain text, .jsonl/.json as JSONL). Plain text is cut into
// documents of at most `chunk_bytes` at line ends, so a file of any size streams in bounded memory.
// Every document is checked to be valid UTF-8; errors name the file and the byte offset or line.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace ar {

class TextSource {
 public:
  static std::unique_ptr<TextSource> open(const std::string& path, const std::string& field = "text",
                                          size_t chunk_bytes = size_t(1) << 20);
  // Next document; false at the end of all files. Throws ar::Error on bad input.
  bool next(std::string* doc);
  const std::vector<std::string>& files() const { return files_; }
  // Whether the document next() returned last came from a plain-text file (not JSONL).
  bool last_was_plain() const { return !jsonl_; }

 private:
  bool open_next_file();
  std::vector<std::string> files_;
  size_t file_index_ = 0;
  std::string field_;
  size_t chunk_bytes_;
  std::ifstream in_;
  bool jsonl_ = false;
  uint64_t offset_ = 0, line_ = 0;
  std::string carry_;  // plain text: bytes read past the last cut
  bool file_had_data_ = false;
};

// Whole source joined with "\n\n" between documents (for evaluation texts).
std::string read_all_text(const std::string& path, const std::string& field = "text");

}  // namespace ar
