#include "pipeline/resume_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <cctype>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace ar {

namespace {
// 4: the fingerprint is run_identity (model files by content) instead of options with a model path.
constexpr int kResumeVersion = 4;

bool parse_hex64(const nlohmann::json& j, uint64_t* out) {
  if (!j.is_string()) return false;
  const std::string s = j.get<std::string>();
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  *out = std::stoull(s, nullptr, 16);
  return true;
}

// The block index of "model.layers.<i>.<rest>" (rest: 1..64 of [A-Za-z0-9_.]), or -1 when `name` is
// not of that form. Hand-written rather than std::regex (libstdc++'s regex trips -Wmaybe-uninitialized
// under the sanitizer builds).
int64_t layer_of(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  size_t i = prefix.size(), digits = 0;
  int64_t block = 0;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && digits < 6; ++i, ++digits)
    block = block * 10 + (name[i] - '0');
  if (digits == 0 || i >= name.size() || name[i] != '.') return -1;
  const std::string rest = name.substr(i + 1);
  if (rest.empty() || rest.size() > 64) return -1;
  for (char c : rest)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return -1;
  return block;
}

// An extra_config entry as OutputSet writes one: a 16-bit Linear's (bits, data_type; the float schemes'
// also act_bits, act_data_type) or a --layer_config format's keys that differ from the global config
// (bits, group_size, sym), each of its type.
bool well_formed_extra(const nlohmann::json& v) {
  if (!v.is_object() || v.empty() || v.size() > 6) return false;
  for (const auto& [k, x] : v.items()) {
    const bool ok = k == "bits" || k == "group_size" || k == "act_bits" ? x.is_number_integer()
                    : k == "sym"                                         ? x.is_boolean()
                    : k == "data_type" || k == "act_data_type"           ? x.is_string()
                                                                         : false;
    if (!ok) return false;
  }
  return true;
}

// extra_config entries may only name Linears of blocks already written, with a well-formed setting.
void check_extra(const nlohmann::json& extra, int64_t next_block, const std::function<void(const std::string&)>& bad) {
  if (!extra.is_object()) bad("'extra' is not an object");
  for (const auto& [k, v] : extra.items()) {
    const int64_t block = layer_of(k);
    if (block < 0 || block >= next_block)
      bad("'extra' names '" + k.substr(0, 80) + "', not a layer of a written block");
    if (!well_formed_extra(v)) bad("'extra' entry of '" + k + "' is malformed");
  }
}
// The writer may only hold tensors of what is written so far: the embeddings and blocks < next_block
// (structure, ranges and files are ShardWriter::restore's to check).
void check_writer_names(const nlohmann::json& w, int64_t next_block, const ResumeExpect& expect,
                        const std::function<void(const std::string&)>& bad) {
  auto check = [&](const nlohmann::json& entries) {
    if (!entries.is_array()) bad("'writer' entries are not an array");
    for (const auto& e : entries) {
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string()) bad("'writer' entry without a name");
      const std::string name = e["name"].get<std::string>();
      const int64_t block = layer_of(name);
      if (name != "model.embed_tokens.weight" && (block < 0 || block >= next_block))
        bad("'writer' holds '" + name.substr(0, 80) + "', not a tensor of the embeddings or a written block");
      if (!expect.tensor_check || !e.contains("shape") || !e["shape"].is_array()) continue;
      std::vector<int64_t> shape;
      for (const auto& d : e["shape"]) shape.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
      const std::string why = expect.tensor_check(name, shape);
      if (!why.empty()) bad("'writer' entry '" + name + "': " + why);
    }
  };
  if (w.contains("entries")) check(w["entries"]);
  if (w.contains("closed") && w["closed"].is_array())
    for (const auto& c : w["closed"]) check(c);
}
// Text from the state for a one-line message: at most 60 bytes, control characters replaced.
std::string shorten(const std::string& s) {
  std::string r = s.size() <= 60 ? s : s.substr(0, 57) + "...";
  for (char& c : r)
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  return r;
}

// The first difference between the stored identity (run_identity: options, model, calibration) and this
// run's, as the field that differs ("model file model.safetensors changed", "option 'bits' is 4 in the
// state, 3 in this run"); "" when equal. `stored` is untrusted: any shape is handled.
std::string identity_difference(const nlohmann::json& stored, const nlohmann::json& now) {
  if (stored == now) return "";
  if (!stored.is_object()) return "'fingerprint' is not an object";
  for (const auto& [field, mine] : now.items()) {
    if (!stored.contains(field)) return "'fingerprint' has no '" + field + "' (written by another version?)";
    const auto& theirs = stored[field];
    if (theirs == mine) continue;
    if (!theirs.is_object() || !mine.is_object()) return field + " differs";
    const bool model = field == "model";
    for (const auto& [k, v] : mine.items()) {
      const std::string what =
          model ? "model file " + k : field == "options" ? "option '" + k + "'" : field + " '" + k + "'";
      if (!theirs.contains(k))
        return what + (model ? " was added since the state was written" : " is absent from the state");
      if (theirs[k] == v) continue;
      if (model) return what + " changed since the state was written";
      return what + " is " + shorten(theirs[k].dump()) + " in the state, " + shorten(v.dump()) + " in this run";
    }
    for (const auto& [k, v] : theirs.items())
      if (!mine.contains(k))
        return model ? "model file " + shorten(k) + " was removed since the state was written"
                     : field + " '" + shorten(k) + "' of the state is unknown to this run";
  }
  return "'fingerprint' holds fields this run does not have";
}
}  // namespace

std::string resume_act_name(const char* which, int64_t next_block) {
  return std::string(which) + "." + std::to_string(next_block) + ".bin";
}

ResumeState parse_resume_state(const std::string& bytes, const std::string& state_path, const ResumeExpect& expect) {
  auto bad = [&](const std::string& what) { fail(ErrorKind::InvalidInput, state_path + ": corrupt or foreign resume state: " + what); };
  const auto j = nlohmann::json::parse(bytes, nullptr, false);
  if (j.is_discarded() || !j.is_object()) bad("not a JSON object");
  for (const char* k : {"version", "fingerprint", "next_block", "x_fp", "x_fp_hash", "x_q", "x_q_hash", "outputs"})
    if (!j.contains(k)) bad(std::string("missing '") + k + "'");
  if (j["version"] != kResumeVersion) bad("unknown version (a state of another autoround version)");
  // Key order does not matter; the model is compared by content, so a changed weight is refused.
  if (const std::string diff = identity_difference(j["fingerprint"], nlohmann::json::parse(expect.fingerprint.dump()));
      !diff.empty())
    bad(diff + " (remove " + std::filesystem::path(state_path).parent_path().string() +
        " to start over, or resume with the same model, options and calibration)");
  ResumeState s;
  if (!j["next_block"].is_number_integer()) bad("'next_block' is not an integer");
  s.next_block = j["next_block"].get<int64_t>();
  if (s.next_block < 1 || s.next_block > expect.num_layers)
    bad("'next_block' " + std::to_string(s.next_block) + " is outside 1.." + std::to_string(expect.num_layers));
  if (j["x_fp"] != resume_act_name("x_fp", s.next_block) || !parse_hex64(j["x_fp_hash"], &s.x_fp_hash))
    bad("'x_fp' must be " + resume_act_name("x_fp", s.next_block) + " with a checksum");
  s.x_fp = resume_act_name("x_fp", s.next_block);
  if (!j["x_q"].is_null()) {
    if (j["x_q"] != resume_act_name("x_q", s.next_block) || !parse_hex64(j["x_q_hash"], &s.x_q_hash))
      bad("'x_q' must be null or " + resume_act_name("x_q", s.next_block) + " with a checksum");
    s.x_q = resume_act_name("x_q", s.next_block);
  }
  const auto& outs = j["outputs"];
  if (!outs.is_array() || outs.size() != expect.outputs)
    bad("'outputs' must be an array of " + std::to_string(expect.outputs) + " (one per --format entry)");
  // extra_config keeps the order its entries were written in (nlohmann::json sorts keys): the resumed
  // run's config.json must be the uninterrupted run's bytes.
  const auto in_order = nlohmann::ordered_json::parse(bytes);
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto& o = outs[i];
    if (!o.is_object() || o.size() != 2 || !o.contains("writer") || !o.contains("extra"))
      bad("an 'outputs' entry must hold exactly 'writer' and 'extra'");
    if (!o["writer"].is_object()) bad("'writer' is not an object");
    check_writer_names(o["writer"], s.next_block, expect, bad);
    check_extra(o["extra"], s.next_block, bad);
    s.outputs.push_back({o["writer"], in_order["outputs"][i]["extra"]});
  }
  return s;
}

std::string resume_state_json(const ResumeState& s, const nlohmann::ordered_json& fingerprint) {
  nlohmann::ordered_json outs = nlohmann::ordered_json::array();
  for (const auto& o : s.outputs)
    outs.push_back({{"writer", nlohmann::ordered_json::parse(o.writer.dump())}, {"extra", o.extra}});
  nlohmann::ordered_json j = {{"version", kResumeVersion},
                              {"fingerprint", fingerprint},
                              {"next_block", s.next_block},
                              {"x_fp", s.x_fp},
                              {"x_fp_hash", hex64(s.x_fp_hash)},
                              {"x_q", s.x_q.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s.x_q)},
                              {"x_q_hash", hex64(s.x_q_hash)},
                              {"outputs", outs}};
  return j.dump();
}

ActSource ActSource::of(const Tensor& t) {
  return {t.nbytes(), [&t](const ActSink& sink) { sink(t.raw(), t.nbytes()); }};
}

void ResumeKeeper::read_act(const std::string& name, uint64_t hash, size_t bytes, const ActSink& sink) const {
  const std::string path = dir_ + "/" + name;
  auto bad = [&](const std::string& what) {
    fail(ErrorKind::InvalidInput, state_path() + ": corrupt resume state: " + path + ": " + what);
  };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec))) bad("missing or not a regular file");
  if (std::filesystem::file_size(path, ec) != bytes)
    bad("size " + std::to_string(std::filesystem::file_size(path, ec)) + " bytes, expected " + std::to_string(bytes));
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) bad(std::string("cannot open: ") + std::strerror(errno));
  std::vector<char> buf(std::min<size_t>(bytes, 16u << 20));
  Hash64 h;
  size_t got = 0;
  while (got < bytes) {
    const ssize_t r = ::read(fd, buf.data(), std::min(buf.size(), bytes - got));
    if (r <= 0) break;
    h.update(buf.data(), size_t(r));
    sink(buf.data(), size_t(r));
    got += size_t(r);
  }
  close(fd);
  if (got != bytes) bad("short read");
  if (h.digest() != hash) bad("checksum mismatch");
}

std::optional<ResumeState> ResumeKeeper::load(const std::vector<ResumeOutput>& outputs) {
  std::error_code ec;
  const auto st = std::filesystem::symlink_status(state_path(), ec);
  if (!std::filesystem::exists(st)) return std::nullopt;
  if (!std::filesystem::is_regular_file(st) || std::filesystem::file_size(state_path(), ec) > (64u << 20))
    fail(ErrorKind::InvalidInput, state_path() + ": corrupt resume state: not a regular file of sane size");
  ResumeState s = parse_resume_state(read_text_file(state_path()), state_path(), expect_);
  if (outputs.size() != s.outputs.size()) fail(ErrorKind::Internal, "resume: output count differs from the expectation");
  return s;
}

void ResumeKeeper::restore_outputs(const ResumeState& s, const std::vector<ResumeOutput>& outputs) {
  try {
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i].writer->restore(s.outputs[i].writer);
  } catch (const Error& e) {
    fail(ErrorKind::InvalidInput, state_path() + ": corrupt resume state: " + e.what());
  }
  for (size_t i = 0; i < outputs.size(); ++i) *outputs[i].extra = s.outputs[i].extra;
  last_ = s.next_block;
}

int64_t ResumeKeeper::restore(Tensor& x_fp, Tensor& x_q, const std::vector<ResumeOutput>& outputs, Context& ctx) {
  const std::optional<ResumeState> s = load(outputs);
  if (!s) return 0;
  auto into = [](Tensor& t) {
    return [&t, off = size_t(0)](const void* p, size_t n) mutable {
      std::memcpy(static_cast<char*>(t.raw()) + off, p, n);
      off += n;
    };
  };
  read_act(s->x_fp, s->x_fp_hash, x_fp.nbytes(), into(x_fp));
  if (!s->x_q.empty()) {
    x_q = Tensor::empty(x_fp.shape(), x_fp.dtype(), ctx);
    read_act(s->x_q, s->x_q_hash, x_q.nbytes(), into(x_q));
  }
  restore_outputs(*s, outputs);
  return s->next_block;
}

void ResumeKeeper::save(int64_t next_block, const ActSource& x_fp, const ActSource* x_q,
                        const std::vector<ResumeOutput>& outputs) {
  ResumeState s;
  s.next_block = next_block;
  auto dump = [&](const ActSource& src, const char* which, uint64_t* hash) {
    const std::string name = resume_act_name(which, next_block);
    AtomicFile f(dir_ + "/" + name);
    Hash64 h;
    size_t wrote = 0;
    src.produce([&](const void* p, size_t n) {
      f.write(p, n);
      h.update(p, n);
      wrote += n;
    });
    AR_CHECK(wrote == src.bytes, "resume: activation stream of the wrong length");
    f.commit();
    *hash = h.digest();
    return name;
  };
  s.x_fp = dump(x_fp, "x_fp", &s.x_fp_hash);
  if (x_q) s.x_q = dump(*x_q, "x_q", &s.x_q_hash);
  for (const auto& o : outputs) s.outputs.push_back({o.writer->checkpoint(), *o.extra});
  write_file_atomic(state_path(), resume_state_json(s, expect_.fingerprint));
  if (last_ >= 0 && last_ != next_block)
    for (const char* which : {"x_fp", "x_q"}) std::remove((dir_ + "/" + resume_act_name(which, last_)).c_str());
  last_ = next_block;
}

void ResumeKeeper::save(int64_t next_block, const Tensor& x_fp, const Tensor& x_q,
                        const std::vector<ResumeOutput>& outputs) {
  const ActSource q = x_q.defined() ? ActSource::of(x_q) : ActSource{};
  save(next_block, ActSource::of(x_fp), x_q.defined() ? &q : nullptr, outputs);
}

void ResumeKeeper::discard() {
  std::remove(state_path().c_str());
  if (last_ >= 0)
    for (const char* which : {"x_fp", "x_q"}) std::remove((dir_ + "/" + resume_act_name(which, last_)).c_str());
}

}  // namespace ar
