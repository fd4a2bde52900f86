// Several token files read as one logical stream: `--train-data
// 'shards/owt_*.h5'` or `a.h5,b.h5:/tokens`. Files follow each other in the
// given order, a glob's matches sorted by name, and must agree on vocab_size
// (and on eos_id and tokenizer where they state them; data/tokenizer_match.h).
//
// Training windows never span two files. Shards are usually cut at document
// boundaries, so a window across one would glue unrelated text without an
// end-of-text token between; keeping every window inside one file also makes
// each window one contiguous hyperslab of one dataset. The cost is under one
// window of tokens per file, nothing at the usual shard sizes. A stream of one
// file has exactly that file's windows, so single-file runs are unchanged.
//
// Opening on many ranks splits the token-range scan: rank r of `comm` checks
// tokens [r*N/world, (r+1)*N/world) of the stream, so start-up time does not
// grow with the dataset per rank. The ranks then agree: every rank throws the
// lowest failing rank's message, which for bad tokens is the stream's first.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/token_dataset.h"

namespace fsdp {

// `count` tokens from global offset `start` of a stream, into `out`.
struct TokenRange {
  int64_t start = 0;
  int64_t count = 0;
  int32_t* out = nullptr;
};

class TokenStream {
 public:
  // Splits `spec` at commas into FILE[:/DATASET] entries; an entry whose FILE
  // holds * ? or [ becomes the matching files, sorted by name. Throws when a
  // pattern matches nothing. No file is opened.
  static std::vector<DataSource> expand(const std::string& spec, const std::string& flag);

  // Opens and validates every file; collective over `comm` unless it is
  // MPI_COMM_NULL (then this process scans every token itself). Throws
  // fsdp::Error, on every rank of `comm` alike.
  static TokenStream open(const std::string& spec, const std::string& flag,
                          MPI_Comm comm = MPI_COMM_NULL);
  static TokenStream open(std::vector<DataSource> sources, const std::string& flag,
                          MPI_Comm comm = MPI_COMM_NULL);

  TokenStream(TokenStream&&) noexcept = default;
  TokenStream& operator=(TokenStream&&) noexcept = default;
  TokenStream(const TokenStream&) = delete;
  TokenStream& operator=(const TokenStream&) = delete;
  ~TokenStream();

  int64_t size() const { return size_; }  // tokens in all files
  int vocab_size() const { return vocab_size_; }
  std::optional<int> eos_id() const { return eos_id_; }
  const std::string& tokenizer() const { return tokenizer_.name; }
  // The first file's that states one; every file's is the same (same_tokenizer).
  const TokenizerId& tokenizer_id() const { return tokenizer_; }
  const std::string& flag() const { return flag_; }
  size_t num_files() const { return files_.size(); }
  const DataSource& source(size_t file) const { return files_.at(file).source; }
  int64_t file_begin(size_t file) const { return files_.at(file).begin; }
  int64_t file_size(size_t file) const { return files_.at(file).size; }
  // "'a.h5'" or "'a.h5' and 11 more files", for messages and logs.
  std::string describe() const;
  // Tokens this process checked at open: about size() / world of `comm`.
  int64_t scanned_tokens() const { return scanned_; }
  // The file holding global offset `offset` and the offset within it.
  std::pair<size_t, int64_t> locate(int64_t offset) const;

  // Reads global tokens [offset, offset + count), which must lie in one file.
  void read(int64_t offset, int64_t count, int32_t* out) const;
  // Reads many ranges under one lock, in file order, merging ranges that
  // touch or overlap into one hyperslab read each.
  void read(std::vector<TokenRange> ranges) const;

  // Throws "<flag>: ... needs at least n" unless some file holds n tokens
  // (a window of n tokens never spans files).
  void require_min_tokens(int64_t n, const std::string& why) const;

  // At most this many files are open at once; the others are reopened when
  // read, so thousands of shards do not exhaust file descriptors.
  static constexpr size_t kMaxOpenFiles = 16;

 private:
  struct File {
    DataSource source;
    int64_t begin = 0, size = 0;
  };
  TokenStream() = default;
  const TokenDataset& dataset(size_t file) const;  // caller holds Hdf5Lock

  std::string flag_;
  std::vector<File> files_;
  int64_t size_ = 0, scanned_ = 0;
  int vocab_size_ = 0;
  std::optional<int> eos_id_;
  TokenizerId tokenizer_;
  // Open files, most recently used first. Guarded by Hdf5Lock, which every
  // read holds anyway.
  mutable std::list<std::pair<size_t, TokenDataset>> open_;
};

// Windows of seq_len + 1 tokens, seq_len apart, inside each file of a stream
// in turn: file f holds (size_f - 1) / seq_len of them. Memory is per file,
// not per window.
class WindowIndex {
 public:
  WindowIndex(const TokenStream& data, int seq_len);
  int64_t count() const { return first_.back(); }
  // Global token offset where window `window` starts.
  int64_t start(int64_t window) const;

 private:
  int seq_len_;
  std::vector<int64_t> first_;  // first window of each file, then the total
  std::vector<int64_t> begin_;  // first token of each file
};

}  // namespace fsdp
