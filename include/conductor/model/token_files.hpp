#pragma once
// Tokenized corpora on disk, memory-mapped read-only (every rank maps the same files; the kernel shares the pages).
//   bytes:    any file, one token per byte (data.source: file).
//   llm.c:    a header of 256 little-endian int32 (magic, version, token count, zeros) and then the tokens:
//             magic 20240520 version 1 with uint16 tokens (GPT-2), magic 20240801 version 7 with uint32 tokens
//             (Llama 3), as llm.c's dev/data/data_common.py write_datafile writes them.
//   Megatron: PREFIX.idx (b"MMIDIDX\0\0", u64 version 1, u8 dtype code, u64 sequence count S, u64 document count
//             D, int32 sizes[S], int64 byte pointers[S], int64 document indices[D]) and PREFIX.bin (the sequences'
//             tokens back to back), as megatron/core/datasets/indexed_dataset.py writes them.
// Every reader checks the header and the file sizes and throws InputError naming the file and what it expected.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace conductor::model {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws InputError naming the file and the system's reason
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

enum class TokenType { u8, i8, i16, u16, i32, u32, i64 };
const char* type_name(TokenType type);  // "uint16", ...

// A contiguous run of little-endian tokens inside a mapped file.
struct TokenSpan {
  std::shared_ptr<const MappedFile> file;
  std::size_t offset = 0;  // bytes from the start of the file to the span's first token
  std::size_t count = 0;   // tokens
  TokenType type = TokenType::u8;
  std::size_t first = 0;  // index in the file of the span's first token (for messages)

  std::int64_t at(std::size_t i) const;
  TokenSpan slice(std::size_t begin, std::size_t n) const;
  const std::string& name() const { return file->path(); }
};

TokenSpan read_bytes_file(const std::string& path);
TokenSpan read_llmc_shard(const std::string& path);
// The tokens of every sequence of the dataset PREFIX (PREFIX.idx checked against PREFIX.bin), in order.
TokenSpan read_megatron_dataset(const std::string& prefix);

// Throws InputError naming `key`, the file, the first token id outside [0, vocab) and its position.
void check_token_ids(const TokenSpan& span, int vocab, const std::string& key);

}  // namespace conductor::model
