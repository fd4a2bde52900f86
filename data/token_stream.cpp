#include "data/token_stream.h"

#include <glob.h>

#include <algorithm>
#include <climits>
#include <exception>

#include "comm/watchdog.h"
#include "common/error.h"
#include "common/hdf5_lock.h"

namespace fsdp {

namespace {

std::vector<std::string> split_commas(const std::string& spec) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    const size_t comma = spec.find(',', pos);
    parts.push_back(spec.substr(pos, comma - pos));
    if (comma == std::string::npos) return parts;
    pos = comma + 1;
  }
}

std::vector<std::string> glob_files(const std::string& pattern, const std::string& flag) {
  glob_t g{};
  const int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.empty()))
    throw_error(flag, ": '", pattern, "' matches no files");
  if (rc != 0) throw_error(flag, ": cannot list the files matching '", pattern, "'");
  // Byte order, not the locale's collation, so every machine agrees.
  std::sort(out.begin(), out.end());
  return out;
}

// Every rank throws the same message: the one of the lowest rank that failed.
// Ranks that succeeded still take part, so no rank waits in a collective that
// a failed rank never reaches.
void agree(MPI_Comm comm, const std::optional<std::string>& error) {
  if (comm == MPI_COMM_NULL) {
    if (error) throw Error(*error);
    return;
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  WatchScope watch("agreeing on the data files' checks");
  int mine = error ? rank : INT_MAX, first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == INT_MAX) return;
  std::string message = error.value_or("");
  int length = static_cast<int>(message.size());
  MPI_Bcast(&length, 1, MPI_INT, first, comm);
  message.resize(static_cast<size_t>(length));
  MPI_Bcast(message.data(), length, MPI_CHAR, first, comm);
  throw Error(message);
}

}  // namespace

std::vector<DataSource> TokenStream::expand(const std::string& spec, const std::string& flag) {
  if (spec.empty()) throw_error(flag, ": empty data path; give FILE.h5 or FILE.h5:/DATASET");
  std::vector<DataSource> out;
  for (const std::string& entry : split_commas(spec)) {
    if (entry.empty())
      throw_error(flag, ": empty entry in '", spec, "'; separate files with single commas");
    const DataSource src = DataSource::parse(entry, flag);
    if (src.file.find_first_of("*?[") == std::string::npos) {
      out.push_back(src);
      continue;
    }
    for (std::string& file : glob_files(src.file, flag))
      out.push_back(DataSource{std::move(file), src.dataset});
  }
  return out;
}

TokenStream TokenStream::open(const std::string& spec, const std::string& flag, MPI_Comm comm) {
  std::vector<DataSource> sources;
  std::optional<std::string> error;
  try {
    sources = expand(spec, flag);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // A glob can see different files on different nodes; fail together.
  agree(comm, error);
  return open(std::move(sources), flag, comm);
}

TokenStream TokenStream::open(std::vector<DataSource> sources, const std::string& flag,
                              MPI_Comm comm) {
  FSDP_CHECK(!sources.empty(), "a token stream needs at least one file");
  TokenStream s;
  s.flag_ = flag;
  std::optional<std::string> error;
  try {
    // Metadata only: cheap, and identical on every rank.
    for (size_t i = 0; i < sources.size(); ++i) {
      TokenDataset ds = TokenDataset::open(sources[i], flag, TokenScan::none);
      const auto& first = s.files_.empty() ? ds.source() : s.files_.front().source;
      const auto mismatch = [&](const char* what, const std::string& a, const std::string& b) {
        throw_error(flag, ": ", what, " ", b, " of ", ds.source().str(), " differs from ", what,
                    " ", a, " of ", first.str(),
                    "; every file of one stream must use the same "
                    "tokenizer");
      };
      if (i == 0) {
        s.vocab_size_ = ds.vocab_size();
        s.eos_id_ = ds.eos_id();
        s.tokenizer_ = ds.tokenizer_id();
      } else {
        if (ds.vocab_size() != s.vocab_size_)
          mismatch("vocab_size", std::to_string(s.vocab_size_), std::to_string(ds.vocab_size()));
        if (s.eos_id_ && ds.eos_id() && *s.eos_id_ != *ds.eos_id())
          mismatch("eos_id", std::to_string(*s.eos_id_), std::to_string(*ds.eos_id()));
        if (!same_tokenizer(s.tokenizer_, ds.tokenizer_id()))
          mismatch("tokenizer", s.tokenizer_.describe(), ds.tokenizer_id().describe());
        if (!s.eos_id_) s.eos_id_ = ds.eos_id();
        if (s.tokenizer_.name.empty() && s.tokenizer_.sha256.empty())
          s.tokenizer_ = ds.tokenizer_id();
      }
      s.files_.push_back(File{ds.source(), s.size_, ds.size()});
      s.size_ += ds.size();
      Hdf5Lock lock;
      s.open_.emplace_front(i, std::move(ds));
      if (s.open_.size() > kMaxOpenFiles) s.open_.pop_back();
    }

    // This rank's share of the scan; files are visited in order, so the first
    // error is the first bad token of the share.
    int rank = 0, world = 1;
    if (comm != MPI_COMM_NULL) {
      MPI_Comm_rank(comm, &rank);
      MPI_Comm_size(comm, &world);
    }
    const int64_t lo = s.size_ / world * rank + std::min<int64_t>(rank, s.size_ % world);
    const int64_t hi = lo + s.size_ / world + (rank < s.size_ % world ? 1 : 0);
    s.scanned_ = hi - lo;
    for (size_t f = 0; f < s.files_.size(); ++f) {
      const File& file = s.files_[f];
      const int64_t a = std::max(lo, file.begin), b = std::min(hi, file.begin + file.size);
      if (a >= b) continue;
      Hdf5Lock lock;
      s.dataset(f).check_tokens(a - file.begin, b - file.begin);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(comm, error);
  return s;
}

TokenStream::~TokenStream() {
  Hdf5Lock lock;
  open_.clear();
}

std::string TokenStream::describe() const {
  if (files_.empty()) return "''";
  std::string out = "'" + files_.front().source.file + "'";
  if (files_.size() > 1) out += " and " + std::to_string(files_.size() - 1) + " more files";
  return out;
}

std::pair<size_t, int64_t> TokenStream::locate(int64_t offset) const {
  FSDP_CHECK(offset >= 0 && offset < size_, "token ", offset, " outside [0, ", size_, ")");
  const auto it = std::upper_bound(files_.begin(), files_.end(), offset,
                                   [](int64_t o, const File& f) { return o < f.begin; });
  const size_t f = static_cast<size_t>(it - files_.begin()) - 1;
  return {f, offset - files_[f].begin};
}

const TokenDataset& TokenStream::dataset(size_t file) const {
  for (auto it = open_.begin(); it != open_.end(); ++it) {
    if (it->first != file) continue;
    open_.splice(open_.begin(), open_, it);
    return open_.front().second;
  }
  open_.emplace_front(file, TokenDataset::open(files_[file].source, flag_, TokenScan::none));
  if (open_.size() > kMaxOpenFiles) open_.pop_back();
  return open_.front().second;
}

void TokenStream::read(int64_t offset, int64_t count, int32_t* out) const {
  read(std::vector<TokenRange>{TokenRange{offset, count, out}});
}

void TokenStream::read(std::vector<TokenRange> ranges) const {
  std::sort(ranges.begin(), ranges.end(),
            [](const TokenRange& a, const TokenRange& b) { return a.start < b.start; });
  std::vector<int32_t> merged;
  Hdf5Lock lock;
  for (size_t i = 0; i < ranges.size();) {
    if (ranges[i].count == 0) {
      ++i;
      continue;
    }
    const auto [f, local] = locate(ranges[i].start);
    const File& file = files_[f];
    // Extend over every following range that touches or overlaps this one
    // and starts in the same file: a range that starts exactly where this
    // file ends touches it but belongs to the next file (windows ending at a
    // file's last token, files shorter than a window).
    const int64_t file_end = file.begin + file.size;
    int64_t end = ranges[i].start + ranges[i].count;
    FSDP_CHECK(end <= file_end, "tokens [", ranges[i].start, ", ", end, ") span two files");
    size_t j = i + 1;
    for (; j < ranges.size() && ranges[j].start <= end && ranges[j].start < file_end; ++j) {
      end = std::max(end, ranges[j].start + ranges[j].count);
      FSDP_CHECK(end <= file_end, "tokens up to ", end, " span two files");
    }
    const TokenDataset& ds = dataset(f);
    if (j == i + 1) {
      ds.read(local, ranges[i].count, ranges[i].out);
    } else {
      merged.resize(static_cast<size_t>(end - ranges[i].start));
      ds.read(local, end - ranges[i].start, merged.data());
      for (size_t k = i; k < j; ++k)
        std::copy_n(merged.begin() + (ranges[k].start - ranges[i].start), ranges[k].count,
                    ranges[k].out);
    }
    i = j;
  }
}

void TokenStream::require_min_tokens(int64_t n, const std::string& why) const {
  size_t longest = 0;
  for (size_t f = 1; f < files_.size(); ++f)
    if (files_[f].size > files_[longest].size) longest = f;
  const File& file = files_.at(longest);
  if (file.size >= n) return;
  if (files_.size() == 1)
    throw_error(flag_, ": ", file.source.dataset, " in '", file.source.file, "' has ", file.size,
                " tokens, but ", why, " needs at least ", n);
  throw_error(flag_, ": the longest of the ", files_.size(), " files, ", file.source.dataset,
              " in '", file.source.file, "', has ", file.size, " tokens, but ", why,
              " needs at least ", n, " in one file");
}

WindowIndex::WindowIndex(const TokenStream& data, int seq_len) : seq_len_(seq_len) {
  FSDP_CHECK(seq_len >= 1, "sequence length ", seq_len);
  first_.push_back(0);
  for (size_t f = 0; f < data.num_files(); ++f) {
    first_.push_back(first_.back() + std::max<int64_t>(0, (data.file_size(f) - 1) / seq_len));
    begin_.push_back(data.file_begin(f));
  }
}

int64_t WindowIndex::start(int64_t window) const {
  FSDP_CHECK(window >= 0 && window < count(), "window ", window, " outside [0, ", count(), ")");
  // The last file whose first window is <= window; files without windows
  // share their first_ with the next one, and upper_bound skips them.
  const size_t f =
      static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), window) - first_.begin()) -
      1;
  return begin_[f] + (window - first_[f]) * seq_len_;
}

}  // namespace fsdp
