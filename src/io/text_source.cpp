#include "io/text_source.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/input_file.h"

namespace fs = std::filesystem;

namespace ar {

namespace {
constexpr const char* kStdin = "-";

bool is_jsonl(const std::string& p) {
  auto e = fs::path(p).extension().string();
  return e == ".jsonl" || e == ".json";
}
bool is_text(const std::string& p) {
  auto e = fs::path(p).extension().string();
  return e == ".txt" || e == ".text" || e == ".md" || e == ".raw";
}

// Offset of the first invalid UTF-8 sequence in s, or npos. Incomplete trailing sequences are
// reported as invalid only when `final` (otherwise the caller carries them over).
size_t invalid_utf8(const std::string& s, bool final, size_t* complete_end) {
  size_t i = 0;
  while (i < s.size()) {
    uint8_t c = uint8_t(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0) return i;
    if (i + n > s.size()) {
      if (final) return i;
      break;
    }
    for (size_t k = 1; k < n; ++k)
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return i;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3Fu);
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;  // overlong, out of range or surrogate
    i += n;
  }
  if (complete_end) *complete_end = i;
  return std::string::npos;
}

// A JSONL field's token ids; each must be an integer in 0..limit-1.
void read_token_ids(const nlohmann::json& a, int64_t limit, const std::string& field, const std::string& where,
                    std::vector<int32_t>* ids) {
  ids->clear();
  ids->reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const nlohmann::json& v = a[i];
    const bool integer = v.is_number_integer();
    if (!integer || (v.is_number_unsigned() ? v.get<uint64_t>() >= uint64_t(limit)
                                            : v.get<int64_t>() < 0 || v.get<int64_t>() >= limit))
      fail(ErrorKind::InvalidInput, where + ": '" + field + "'[" + std::to_string(i) + "] = " + v.dump().substr(0, 40) +
                                        " is not a token id (an integer from 0 to " + std::to_string(limit - 1) +
                                        ", the model's vocabulary)");
    ids->push_back(int32_t(v.get<int64_t>()));
  }
}
}  // namespace

std::unique_ptr<TextSource> TextSource::open(const std::string& path, const std::string& field, size_t chunk_bytes) {
  TextSourceOptions opt;
  opt.chunk_bytes = chunk_bytes;
  return open(path, field, opt);
}

std::unique_ptr<TextSource> TextSource::open(const std::string& path, const std::string& field,
                                             const TextSourceOptions& opt) {
  auto s = std::unique_ptr<TextSource>(new TextSource());
  s->field_ = field;
  s->opt_ = opt;
  s->opt_.chunk_bytes = std::max<size_t>(opt.chunk_bytes, 64);
  const std::string label = opt.option.empty() ? path : opt.option + " " + path;
  if (path == kStdin) {
    if (!opt.allow_stdin) fail(ErrorKind::InvalidInput, label + ": standard input is not accepted here (name a file)");
    s->files_.push_back(path);
    return s;
  }
  // status() only stats: nothing is opened here, so a FIFO cannot block.
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) {
    for (auto it = fs::recursive_directory_iterator(path, ec); it != fs::recursive_directory_iterator(); ++it)
      if (it->is_regular_file() && (is_jsonl(it->path().string()) || is_text(it->path().string())))
        s->files_.push_back(it->path().string());
    std::sort(s->files_.begin(), s->files_.end());
    if (s->files_.empty()) fail(ErrorKind::InvalidInput, path + ": directory holds no .txt/.jsonl/.json files");
  } else if (fs::exists(st)) {
    ::close(open_regular_file(path, label));  // refuses a FIFO, device or socket now, before any work
    s->files_.push_back(path);
  } else {
    fail(ErrorKind::Io, path + ": no such file or directory");
  }
  return s;
}

TextSource::~TextSource() { close_file(); }

void TextSource::close_file() {
  if (fd_ > 0) ::close(fd_);  // never fd 0: standard input stays open
  fd_ = -1;
}

bool TextSource::open_next_file() {
  close_file();
  if (file_index_ >= files_.size()) return false;
  const std::string& p = files_[file_index_++];
  fd_ = p == kStdin ? STDIN_FILENO : open_regular_file(p, opt_.option.empty() ? p : opt_.option + " " + p);
  jsonl_ = p != kStdin && is_jsonl(p);
  at_eof_ = false;
  pending_.clear();
  pending_at_ = 0;
  offset_ = line_ = 0;
  carry_.clear();
  file_had_data_ = false;
  return true;
}

size_t TextSource::read_bytes(char* p, size_t n) {
  const std::string& path = files_[file_index_ - 1];
  const size_t got = at_eof_ ? 0 : read_up_to(fd_, p, n, path);
  at_eof_ = got < n;
  bytes_read_ += got;
  if (bytes_read_ > opt_.max_bytes)
    fail(ErrorKind::InvalidInput, (opt_.option.empty() ? path : opt_.option + " " + path) + ": more than " +
                                      std::to_string(opt_.max_bytes) + " bytes, the limit for one text source");
  return got;
}

bool TextSource::read_line(std::string* line) {
  size_t scanned = pending_at_;
  for (;;) {
    if (size_t nl = pending_.find('\n', scanned); nl != std::string::npos) {
      line->assign(pending_, pending_at_, nl - pending_at_);
      pending_at_ = nl + 1;
      return true;
    }
    if (at_eof_) {
      if (pending_at_ == pending_.size()) return false;
      line->assign(pending_, pending_at_, std::string::npos);  // a last line without '\n'
      pending_at_ = pending_.size();
      return true;
    }
    pending_.erase(0, pending_at_);  // the lines returned already go only when more is read (no O(n^2))
    pending_at_ = 0;
    scanned = pending_.size();
    char buf[1 << 16];
    pending_.append(buf, read_bytes(buf, sizeof buf));
  }
}


bool TextSource::next(std::string* doc) {
  last_was_ids_ = false;
  for (;;) {
    if (fd_ < 0 && !open_next_file()) return false;
    const std::string path = files_[file_index_ - 1] == kStdin ? "standard input" : files_[file_index_ - 1];
    if (jsonl_) {
      std::string line;
      if (!read_line(&line)) {
        if (!file_had_data_) fail(ErrorKind::InvalidInput, path + ": file is empty");
        close_file();
        continue;
      }
      ++line_;
      uint64_t line_start = offset_;
      offset_ += line.size() + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      file_had_data_ = true;
      if (size_t bad = invalid_utf8(line, true, nullptr); bad != std::string::npos)
        fail(ErrorKind::InvalidInput, path + ": invalid UTF-8 at byte " + std::to_string(line_start + bad) +
                                          " (line " + std::to_string(line_) + ")");
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        fail(ErrorKind::InvalidInput, path + ":" + std::to_string(line_) + ": not a JSON object");
      const std::string where = path + ":" + std::to_string(line_);
      if (opt_.token_id_limit > 0 && j.contains(field_) && j[field_].is_array()) {
        last_was_ids_ = true;
        read_token_ids(j[field_], opt_.token_id_limit, field_, where, &ids_);
        doc->clear();
        return true;
      }
      if (!j.contains(field_) || !j[field_].is_string())
        fail(ErrorKind::InvalidInput, where + ": no string field '" + field_ + "'" +
                                          (opt_.token_id_limit > 0 ? " (nor an array of token ids)" : ""));
      *doc = j[field_].get<std::string>();
      return true;
    }
    // Plain text: read up to chunk_bytes, cut at the last newline, validate, carry the rest.
    std::string buf = std::move(carry_);
    carry_.clear();
    size_t want = opt_.chunk_bytes > buf.size() ? opt_.chunk_bytes - buf.size() : 0;
    std::string more(want, '\0');
    more.resize(read_bytes(more.data(), want));
    const bool eof = more.size() < want;
    buf += more;
    if (buf.empty()) {
      if (!file_had_data_) fail(ErrorKind::InvalidInput, path + ": file is empty");
      close_file();
      continue;
    }
    file_had_data_ = true;
    size_t cut = buf.size();
    if (!eof) {
      size_t nl = buf.rfind('\n');
      cut = nl != std::string::npos ? nl + 1 : buf.size();
    }
    size_t complete = cut;
    if (size_t bad = invalid_utf8(buf.substr(0, cut), eof, &complete); bad != std::string::npos)
      fail(ErrorKind::InvalidInput, path + ": invalid UTF-8 at byte " + std::to_string(offset_ + bad));
    if (!eof && complete < cut) cut = complete;  // no newline in the chunk: never split a code point
    carry_ = buf.substr(cut);
    buf.resize(cut);
    offset_ += cut;
    if (eof && carry_.empty()) close_file();
    *doc = std::move(buf);
    return true;
  }
}

std::string read_all_text(const std::string& path, const std::string& field) {
  return read_all_text(path, field, TextSourceOptions{});
}

std::string read_all_text(const std::string& path, const std::string& field, const TextSourceOptions& opt) {
  auto src = TextSource::open(path, field, opt);
  std::string all, doc;
  bool first = true;
  bool plain = path == kStdin || (!is_jsonl(path) && !fs::is_directory(path));
  while (src->next(&doc)) {
    if (!first && !plain) all += "\n\n";
    all += doc;
    first = false;
  }
  return all;
}

}  // namespace ar
