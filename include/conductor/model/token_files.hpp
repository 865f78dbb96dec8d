#pragma once
// Tokenized corpora on disk, read with pread() (every rank opens the same files; the kernel's page cache holds
// their pages once per node).
//   bytes:    any file, one token per byte (data.source: file).
//   llm.c:    a header of 256 little-endian int32 (magic, version, token count, zeros) and then the tokens:
//             magic 20240520 version 1 with uint16 tokens (GPT-2), magic 20240801 version 7 with uint32 tokens
//             (Llama 3), as llm.c's dev/data/data_common.py write_datafile writes them.
//   Megatron: PREFIX.idx (b"MMIDIDX\0\0", u64 version 1, u8 dtype code, u64 sequence count S, u64 document count
//             D, int32 sizes[S], int64 byte pointers[S], int64 document indices[D]) and PREFIX.bin (the sequences'
//             tokens back to back), as megatron/core/datasets/indexed_dataset.py writes them.
// Every reader checks the header and the file sizes and throws InputError naming the file and what it expected.
// The files are never memory-mapped: a mapped file truncated under a run killed it with SIGBUS (no message, the
// trace left open). A read the file no longer holds is one InputError naming the file, the bytes asked for and
// the file's size now. A file replaced by rename keeps being read as the one opened (the open descriptor's).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "conductor/util/fd.hpp"

namespace conductor::model {

// A data file, open for reading for the lifetime of the object.
class DataFile {
 public:
  explicit DataFile(const std::string& path);  // throws InputError naming the file and the system's reason
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;
  std::size_t size() const { return size_; }  // bytes when it was opened
  const std::string& path() const { return path_; }
  // Bytes [offset, offset + n) into `out`. A short read (the file truncated since it was opened) or an I/O error
  // throws InputError naming the file, the bytes asked for and its size now.
  void read(std::size_t offset, std::size_t n, void* out) const;

 private:
  std::string path_;
  util::Fd fd_;
  std::size_t size_ = 0;
};

enum class TokenType { u8, i8, i16, u16, i32, u32, i64 };
const char* type_name(TokenType type);  // "uint16", ...

// A contiguous run of little-endian tokens inside a file.
struct TokenSpan {
  std::shared_ptr<const DataFile> file;
  std::size_t offset = 0;  // bytes from the start of the file to the span's first token
  std::size_t count = 0;   // tokens
  TokenType type = TokenType::u8;
  std::size_t first = 0;  // index in the file of the span's first token (for messages)

  std::int64_t at(std::size_t i) const;  // one token (one read)
  // Tokens [begin, begin + n) as ints, in one read (DataFile::read's errors).
  void copy(std::size_t begin, std::size_t n, int* out) const;
  TokenSpan slice(std::size_t begin, std::size_t n) const;
  const std::string& name() const { return file->path(); }
};

TokenSpan read_bytes_file(const std::string& path);
TokenSpan read_llmc_shard(const std::string& path);
// The tokens of every sequence of the dataset PREFIX (PREFIX.idx checked against PREFIX.bin), in order.
TokenSpan read_megatron_dataset(const std::string& prefix);

// What identifies a data file's content: recorded in checkpoints, compared when a run resumes.
struct DataFileIdentity {
  std::string path;  // as data.path gave it (a glob's match; megatron: PREFIX.bin, which holds every token)
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;  // zlib's CRC-32 of the whole file (util/checksum.hpp)
};

// Reads the span's whole file once, in pieces: throws InputError naming `key`, the file, the first token id
// outside [0, vocab) and its position; returns the file's identity, computed in the same pass.
DataFileIdentity scan_token_file(const TokenSpan& span, int vocab, const std::string& key);

}  // namespace conductor::model
