// One token file stored in HDF5 (docs/ARCHITECTURE.md, "Token dataset"): a 1-D uint16 or
// uint32 dataset with a `vocab_size` attribute, optionally `eos_id` and
// `tokenizer`. Opening validates everything, including (unless the caller
// splits that scan, as TokenStream does across ranks) every token against
// vocab_size, so a bad file fails before any GPU work starts with one line
// that names the flag, file, dataset and what to do. Several files form one
// stream through data/token_stream.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "data/tokenizer_match.h"

namespace fsdp {

// Where a token stream lives: "path.h5" (dataset /tokens) or
// "path.h5:/dataset". The split is at the last ":/", so file names that
// contain ':' still work when no dataset is given.
struct DataSource {
  std::string file;
  std::string dataset = "/tokens";

  // `flag` only labels the error for an empty spec.
  static DataSource parse(const std::string& spec, const std::string& flag = "data");
  std::string str() const { return file + ":" + dataset; }
};

// Whether open() checks every token against vocab_size.
enum class TokenScan { all, none };

// Move-only owner of an open file and dataset. Every HDF5 call holds
// fsdp::Hdf5Lock (common/hdf5_lock.h), so TokenDatasets may be used from
// several threads, one call at a time each.
class TokenDataset {
 public:
  // Opens read-only and validates; throws fsdp::Error. `flag` (e.g.
  // "--train-data") starts every message so the user knows which option to fix.
  // TokenScan::none leaves the token scan to check_tokens().
  static TokenDataset open(const DataSource& source, const std::string& flag,
                           TokenScan scan = TokenScan::all);

  TokenDataset(TokenDataset&& other) noexcept;
  TokenDataset& operator=(TokenDataset&& other) noexcept;
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;
  ~TokenDataset();

  int64_t size() const { return size_; }
  int vocab_size() const { return vocab_size_; }
  std::optional<int> eos_id() const { return eos_id_; }
  const std::string& tokenizer() const { return tokenizer_; }  // "" when absent
  // The name, the `tokenizer_sha256` attribute and where to read the table.
  TokenizerId tokenizer_id() const {
    return {source_.file, vocab_size_, tokenizer_, tokenizer_sha256_, text_encoder_};
  }
  const DataSource& source() const { return source_; }
  const std::string& flag() const { return flag_; }
  int bytes_per_token() const { return bytes_per_token_; }  // 2 or 4, as stored

  // Reads tokens [offset, offset + count) into `out`. Values are checked
  // against vocab_size again (a compare per token, nothing beside the I/O), so
  // a file changed after the open-time scan still fails with the bad token's
  // offset instead of becoming a wild embedding lookup.
  void read(int64_t offset, int64_t count, int32_t* out) const;

  // Throws the bad-token error for the first token >= vocab_size in
  // [begin, end), reading in bounded chunks.
  void check_tokens(int64_t begin, int64_t end) const;

  // Throws "<flag>: <dataset> in '<file>' has N tokens, but <why> needs at
  // least n" when size() < n, e.g. n = seq_len + 1 for one training sequence.
  void require_min_tokens(int64_t n, const std::string& why) const;

 private:
  TokenDataset() = default;
  void close() noexcept;

  DataSource source_;
  std::string flag_;
  // hid_t values (int64_t in HDF5 1.10+), kept as int64_t so this header does
  // not pull in hdf5.h and, with parallel HDF5, mpi.h.
  int64_t file_id_ = -1;
  int64_t dataset_id_ = -1;
  int64_t size_ = 0;
  int vocab_size_ = 0;
  std::optional<int> eos_id_;
  std::string tokenizer_;
  std::string tokenizer_sha256_;
  std::string text_encoder_;
  int bytes_per_token_ = 0;
};

}  // namespace fsdp
