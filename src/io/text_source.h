// Streaming text documents for calibration and evaluation. A source is a plain-text file, a JSONL
// file (one JSON object per line, the document in `field`), or a directory of such files (sorted by
// name, recursively; .txt/.text/.md read as plain text, .jsonl/.json as JSONL). Plain text is cut into
// documents of at most `chunk_bytes` at line ends, so a file of any size streams in bounded memory.
// Every document is checked to be valid UTF-8; errors name the file and the byte offset or line.
// For calibration a JSONL field may instead hold the document's token ids (TextSourceOptions).
//
// Nothing here can hang: files must be regular files (a FIFO, device, socket is refused before it is
// opened, io/input_file.h), and a source may hold at most `max_bytes` (kMaxTextSourceBytes unless a
// caller, such as a test, asks for less), so an endless stream read as standard input ends in an error.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ar {

// 4 GiB per source: far above any calibration set or evaluation text (pile-10k is 33 MB, the whole
// wikitext-103 training split 0.5 GB), low enough that the error comes within minutes and an
// evaluation text, which is held in memory, still fits.
inline constexpr uint64_t kMaxTextSourceBytes = uint64_t(1) << 32;

struct TextSourceOptions {
  std::string option;         // the option naming the source ("--text"), for refusals; may be empty
  bool allow_stdin = false;   // "-" reads standard input (as plain text)
  size_t chunk_bytes = size_t(1) << 20;
  uint64_t max_bytes = kMaxTextSourceBytes;
  // Calibration: a JSONL field may hold an array of token ids (integers in 0..token_id_limit-1)
  // instead of a string; 0 refuses arrays.
  int64_t token_id_limit = 0;
};

class TextSource {
 public:
  static std::unique_ptr<TextSource> open(const std::string& path, const std::string& field = "text",
                                          size_t chunk_bytes = size_t(1) << 20);
  static std::unique_ptr<TextSource> open(const std::string& path, const std::string& field,
                                          const TextSourceOptions& opt);
  ~TextSource();
  TextSource(const TextSource&) = delete;
  TextSource& operator=(const TextSource&) = delete;
  // Next document; false at the end of all files. Throws ar::Error on bad input.
  bool next(std::string* doc);
  const std::vector<std::string>& files() const { return files_; }
  // Whether the document next() returned last came from a plain-text file (not JSONL).
  bool last_was_plain() const { return !jsonl_; }
  // Whether it was an array of token ids (next() then gave an empty string); they are in last_ids().
  bool last_was_ids() const { return last_was_ids_; }
  const std::vector<int32_t>& last_ids() const { return ids_; }

 private:
  TextSource() = default;
  bool open_next_file();
  void close_file();
  size_t read_bytes(char* p, size_t n);  // counts against max_bytes
  bool read_line(std::string* line);      // JSONL: one line without its '\n'; false at the end
  std::vector<std::string> files_;
  size_t file_index_ = 0;
  std::string field_;
  TextSourceOptions opt_;
  int fd_ = -1;
  bool at_eof_ = false;
  uint64_t bytes_read_ = 0;  // over the whole source
  std::string pending_;      // JSONL: bytes read, from pending_at_ on not yet returned as lines
  size_t pending_at_ = 0;
  bool jsonl_ = false;
  uint64_t offset_ = 0, line_ = 0;
  std::string carry_;  // plain text: bytes read past the last cut
  bool file_had_data_ = false;
  bool last_was_ids_ = false;
  std::vector<int32_t> ids_;
};

// Whole source joined with "\n\n" between documents (for evaluation texts).
std::string read_all_text(const std::string& path, const std::string& field = "text");
std::string read_all_text(const std::string& path, const std::string& field, const TextSourceOptions& opt);

}  // namespace ar
