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
  std::vector<DatasetSource> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    DatasetSource s;
    std::stringstream is(item);
    std::getline(is, s.path, ':');
    if (s.path.empty()) bad_spec(item, "no PATH before the sub-options");
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
  if (out.empty()) fail(ErrorKind::InvalidInput, "--dataset '" + spec + "' names no source");
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
  int64_t k, seqlen, seen = 0;
  std::mt19937_64 rng;
  std::vector<std::vector<int32_t>> items;
  void offer(const int32_t* s) {
    if (repetitive(s, seqlen)) return;
    ++seen;
    if (int64_t(items.size()) < k) {
      items.emplace_back(s, s + seqlen);
    } else {
      uint64_t j = rng() % uint64_t(seen);
      if (j < uint64_t(k)) items[size_t(j)].assign(s, s + seqlen);
    }
  }
};

void feed(const Tokenizer& tok, const std::string& text, bool concat, std::vector<int32_t>& stream, Reservoir& r) {
  std::vector<int32_t> ids = tok.encode(text, true);
  if (concat) {
    stream.insert(stream.end(), ids.begin(), ids.end());
    size_t used = 0;
    while (int64_t(stream.size() - used) >= r.seqlen) {
      r.offer(stream.data() + used);
      used += size_t(r.seqlen);
    }
    stream.erase(stream.begin(), stream.begin() + long(used));
  } else if (int64_t(ids.size()) >= r.seqlen) {
    r.offer(ids.data());
  }
}
}  // namespace

CalibData build_calibration(const Tokenizer& tok, const CalibOptions& opt) {
  if (opt.nsamples <= 0) fail(ErrorKind::InvalidInput, "--nsamples must be positive");
  if (opt.seqlen < 2) fail(ErrorKind::InvalidInput, "--seqlen must be at least 2");
  CalibData d;
  d.seqlen = opt.seqlen;
  std::vector<DatasetSource> sources;
  if (opt.dataset.empty()) {
    d.notes.push_back("no --dataset given: using the built-in calibration corpus (" +
                      std::to_string(builtin_corpus().size()) + " bytes, packed with concat=true)");
  } else {
    sources = parse_dataset_spec(opt.dataset);
  }
  std::vector<std::vector<int32_t>> samples;
  const size_t n_src = std::max<size_t>(1, sources.size());
  for (size_t si = 0; si < n_src; ++si) {
    int64_t want = opt.nsamples;
    if (!sources.empty()) {
      if (sources[si].num > 0) want = sources[si].num;
      else if (sources.size() > 1) want = (opt.nsamples + int64_t(n_src) - 1 - int64_t(si)) / int64_t(n_src);
    }
    Reservoir r{want, opt.seqlen, 0, std::mt19937_64(opt.seed + si), {}};
    std::vector<int32_t> stream;
    if (sources.empty()) {
      // Packed corpus, cycled so that small seqlen/nsamples settings get distinct windows.
      std::vector<int32_t> ids = tok.encode(builtin_corpus(), true);
      for (int64_t off = 0; off + opt.seqlen <= int64_t(ids.size()); off += opt.seqlen) r.offer(ids.data() + off);
    } else {
      auto src = TextSource::open(sources[si].path, sources[si].field);
      std::string doc;
      while (src->next(&doc)) feed(tok, doc, sources[si].concat, stream, r);
    }
    if (r.items.empty())
      fail(ErrorKind::InvalidInput, (sources.empty() ? std::string("built-in corpus") : sources[si].path) +
                                        ": no usable calibration sample of " + std::to_string(opt.seqlen) +
                                        " tokens (documents too short? try :concat=true or a smaller --seqlen)");
    for (auto& s : r.items) samples.push_back(std::move(s));
  }
  std::mt19937_64 rng(opt.seed);
  std::shuffle(samples.begin(), samples.end(), rng);
  if (int64_t(samples.size()) > opt.nsamples) samples.resize(size_t(opt.nsamples));
  if (int64_t(samples.size()) < opt.nsamples)
    d.notes.push_back("only " + std::to_string(samples.size()) + " usable samples of " + std::to_string(opt.seqlen) +
                      " tokens: nsamples reduced from " + std::to_string(opt.nsamples));
  d.n = int64_t(samples.size());
  for (const auto& s : samples) d.ids.insert(d.ids.end(), s.begin(), s.end());
  return d;
}

}  // namespace ar::quant
