#include "quant/calib.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "io/text_source.h"

namespace ar::quant {

namespace {
[[noreturn]] void bad_spec(const std::string& item, const std::string& msg) {
  fail(ErrorKind::InvalidInput, "--dataset '" + item + "': " + msg);
}

int64_t parse_num(const std::string& item, const std::string& v) {
  int64_t n = 0;
  const char* end = v.data() + v.size();
  auto [p, ec] = std::from_chars(v.data(), end, n);
  if (v.empty() || ec != std::errc() || p != end)
    bad_spec(item, ":num= '" + v + "' is not a whole number");
  if (n < 1 || n > (int64_t(1) << 20))
    bad_spec(item, ":num=" + v + " is out of range (1 to " + std::to_string(int64_t(1) << 20) + ")");
  return n;
}

void set_key(DatasetSource& s, const std::string& item, const std::string& k, const std::string& v) {
  if (k == "concat") {
    if (v != "true" && v != "false" && v != "1" && v != "0")
      bad_spec(item, ":concat= '" + v + "' must be true or false");
    s.concat = v == "true" || v == "1";
  } else if (k == "num") {
    s.num = parse_num(item, v);
  } else if (k == "field") {
    if (v.empty()) bad_spec(item, ":field= must name a JSONL field");
    s.field = v;
  } else {
    bad_spec(item, "sub-option '" + k + "' is unknown (concat, num, field)");
  }
}
}  // namespace

std::vector<DatasetSource> parse_dataset_spec(const std::string& spec) {
  if (spec.empty()) fail(ErrorKind::InvalidInput, "--dataset '' names no source");
  // An empty entry is most often a typo that dropped a source (a,,b or a trailing comma): say so.
  if (spec.front() == ',' || spec.back() == ',' || spec.find(",,") != std::string::npos)
    fail(ErrorKind::InvalidInput, "--dataset '" + spec + "' has an empty entry (two commas, or one at either end)");
  std::vector<DatasetSource> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    DatasetSource s;
    std::stringstream is(item);
    std::getline(is, s.path, ':');
    if (s.path.empty()) bad_spec(item, "no PATH before the sub-options");
    // Every rank of a multi-process run reads the sources itself; standard input reaches one of them.
    if (s.path == "-") bad_spec(item, "standard input ('-') is not accepted: name a file or directory");
    std::set<std::string> seen;
    std::string kv;
    while (std::getline(is, kv, ':')) {
      auto eq = kv.find('=');
      if (eq == std::string::npos) bad_spec(item, "sub-option '" + kv + "' is not key=value");
      const std::string k = kv.substr(0, eq);
      if (!seen.insert(k).second) bad_spec(item, ":" + k + "= is given twice");
      set_key(s, item, k, kv.substr(eq + 1));
    }
    if (!item.empty() && item.back() == ':') bad_spec(item, "ends with an empty sub-option");
    out.push_back(s);
  }
  return out;
}

namespace {
// AutoRound's repeat filter: the last token may occur at most seqlen/2 times in the sample.
bool repetitive(const int32_t* s, int64_t seqlen) {
  int64_t c = 0;
  for (int64_t i = 0; i < seqlen; ++i) c += s[i] == s[seqlen - 1];
  return c > seqlen / 2;
}

// Seeded reservoir of up to k samples of seqlen tokens.
struct Reservoir {
  int64_t k, seqlen, seen = 0, n_repetitive = 0;
  std::mt19937_64 rng;
  std::vector<std::vector<int32_t>> items;
  void offer(const int32_t* s) {
    if (repetitive(s, seqlen)) {
      ++n_repetitive;
      return;
    }
    ++seen;
    if (int64_t(items.size()) < k) {
      items.emplace_back(s, s + seqlen);
    } else {
      uint64_t j = rng() % uint64_t(seen);
      if (j < uint64_t(k)) items[size_t(j)].assign(s, s + seqlen);
    }
  }
};

// AutoRound's concat: documents' own BOS/EOS stripped, bodies joined, each sample BOS + body (+ EOS).
class Packer {
 public:
  Packer(const Tokenizer& tok, Reservoir& r) : r_(r) {
    const std::vector<int32_t> probe = tok.encode("a", true);  // what the tokenizer adds around a text
    if (tok.bos() >= 0 && !probe.empty() && probe.front() == tok.bos()) bos_ = tok.bos();
    if (tok.eos() >= 0 && probe.size() > 1 && probe.back() == tok.eos()) eos_ = tok.eos();
    body_ = std::max<int64_t>(1, r.seqlen - (bos_ >= 0) - (eos_ >= 0));
  }
  void add(std::vector<int32_t> ids, int64_t truncate_to) {
    if (truncate_to > 0 && int64_t(ids.size()) > truncate_to) ids.resize(size_t(truncate_to));
    size_t b = 0, e = ids.size();
    if (bos_ >= 0 && e > b && ids[b] == bos_) ++b;
    if (eos_ >= 0 && e > b && ids[e - 1] == eos_) --e;
    stream_.insert(stream_.end(), ids.begin() + long(b), ids.begin() + long(e));
    size_t used = 0;
    std::vector<int32_t> sample;
    while (int64_t(stream_.size() - used) >= body_) {
      sample.clear();
      if (bos_ >= 0) sample.push_back(bos_);
      sample.insert(sample.end(), stream_.begin() + long(used), stream_.begin() + long(used) + body_);
      if (eos_ >= 0) sample.push_back(eos_);
      sample.resize(size_t(r_.seqlen), sample.back());  // only when seqlen < 3 with both BOS and EOS
      r_.offer(sample.data());
      used += size_t(body_);
    }
    stream_.erase(stream_.begin(), stream_.begin() + long(used));
  }

 private:
  Reservoir& r_;
  int32_t bos_ = -1, eos_ = -1;
  int64_t body_ = 1;
  std::vector<int32_t> stream_;
};

// What one source gave, for the note when there are fewer samples than asked.
struct SourceStats {
  int64_t documents = 0, too_short = 0, tokens = 0;
};

void draw_from_source(const Tokenizer& tok, int64_t vocab_size, const DatasetSource& src_opt, Reservoir& r,
                      SourceStats& st) {
  TextSourceOptions opt;
  opt.option = "--dataset";  // no standard input: every rank of a multi-process run reads the source
  opt.token_id_limit = vocab_size;
  auto src = TextSource::open(src_opt.path, src_opt.field, opt);
  Packer packer(tok, r);
  std::string doc;
  while (src->next(&doc)) {
    const bool plain = src->last_was_plain();
    const bool concat = src_opt.concat.value_or(plain);
    std::vector<int32_t> ids = src->last_was_ids() ? src->last_ids() : tok.encode(doc, true);
    ++st.documents;
    st.tokens += int64_t(ids.size());
    if (concat) {
      packer.add(std::move(ids), plain ? 0 : r.seqlen);
    } else if (int64_t(ids.size()) >= r.seqlen) {
      r.offer(ids.data());
    } else {
      ++st.too_short;
    }
  }
}

std::string fewer_samples_note(int64_t got, const CalibOptions& opt, int64_t seqlen, const SourceStats& st) {
  std::string note = "only " + std::to_string(got) + " usable samples of " + std::to_string(seqlen) +
                     " tokens (from " + std::to_string(st.tokens) + " tokens of text): nsamples reduced from " +
                     std::to_string(opt.nsamples) + ". More text";
  if (st.too_short > 0)
    note += ", :concat=true (" + std::to_string(st.too_short) + " of " + std::to_string(st.documents) +
            " documents are shorter than --seqlen and were dropped)";
  note += " or a smaller --seqlen gives more";
  return note;
}

int64_t effective_seqlen(const CalibOptions& opt, std::vector<std::string>& notes) {
  if (opt.seqlen < 2) fail(ErrorKind::InvalidInput, "--seqlen must be at least 2");
  if (opt.max_context <= 0 || opt.seqlen <= opt.max_context) return opt.seqlen;
  if (opt.seqlen_given)
    fail(ErrorKind::InvalidInput, "--seqlen " + std::to_string(opt.seqlen) + " exceeds " + opt.context_field + " " +
                                      std::to_string(opt.max_context) + " (the model's context)");
  notes.push_back("--seqlen " + std::to_string(opt.seqlen) + " clamped to the model's context of " +
                  std::to_string(opt.max_context) + " tokens (" + opt.context_field + ")");
  return opt.max_context;
}
}  // namespace

CalibData build_calibration(const Tokenizer& tok, const CalibOptions& opt) {
  if (opt.nsamples <= 0) fail(ErrorKind::InvalidInput, "--nsamples must be positive");
  CalibData d;
  d.seqlen = effective_seqlen(opt, d.notes);
  std::vector<DatasetSource> sources;
  if (opt.dataset.empty()) {
    d.notes.push_back("no --dataset given: using the built-in calibration corpus (" +
                      std::to_string(builtin_corpus().size()) + " bytes of plain text, packed)");
  } else {
    sources = parse_dataset_spec(opt.dataset);
  }
  std::vector<std::vector<int32_t>> samples;
  SourceStats stats;
  const size_t n_src = std::max<size_t>(1, sources.size());
  for (size_t si = 0; si < n_src; ++si) {
    int64_t want = opt.nsamples;
    if (!sources.empty()) {
      if (sources[si].num > 0) want = sources[si].num;
      else if (sources.size() > 1) want = (opt.nsamples + int64_t(n_src) - 1 - int64_t(si)) / int64_t(n_src);
    }
    Reservoir r{want, d.seqlen, 0, 0, std::mt19937_64(opt.seed + si), {}};
    SourceStats st;
    if (sources.empty()) {
      std::vector<int32_t> ids = tok.encode(builtin_corpus(), true);
      st.documents = 1;
      st.tokens = int64_t(ids.size());
      Packer(tok, r).add(std::move(ids), 0);
    } else {
      draw_from_source(tok, opt.vocab_size > 0 ? opt.vocab_size : tok.vocab_size(), sources[si], r, st);
    }
    stats.documents += st.documents;
    stats.too_short += st.too_short;
    stats.tokens += st.tokens;
    if (r.items.empty())
      fail(ErrorKind::InvalidInput, (sources.empty() ? std::string("built-in corpus") : sources[si].path) +
                                        ": no usable calibration sample of " + std::to_string(d.seqlen) + " tokens (" +
                                        std::to_string(st.tokens) + " tokens in " + std::to_string(st.documents) +
                                        " documents" +
                                        (st.too_short ? ", " + std::to_string(st.too_short) + " shorter than --seqlen: try :concat=true" : std::string()) +
                                        (r.n_repetitive ? ", " + std::to_string(r.n_repetitive) + " dropped as repetitive" : std::string()) +
                                        "; a smaller --seqlen may help)");
    for (auto& s : r.items) samples.push_back(std::move(s));
  }
  std::mt19937_64 rng(opt.seed);
  std::shuffle(samples.begin(), samples.end(), rng);
  if (int64_t(samples.size()) > opt.nsamples) samples.resize(size_t(opt.nsamples));
  if (int64_t(samples.size()) < opt.nsamples) d.notes.push_back(fewer_samples_note(int64_t(samples.size()), opt, d.seqlen, stats));
  d.n = int64_t(samples.size());
  for (const auto& s : samples) d.ids.insert(d.ids.end(), s.begin(), s.end());
  return d;
}

}  // namespace ar::quant
