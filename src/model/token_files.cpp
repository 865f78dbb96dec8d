// Tokenized corpora on disk (token_files.hpp).
#include "conductor/model/token_files.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "conductor/util/error.hpp"

namespace conductor::model {

namespace {

std::string quoted(const std::string& path) { return "'" + path + "'"; }
std::string num(std::uint64_t v) { return std::to_string(v); }

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian files on little-endian hosts (x86-64, aarch64)
  return v;
}

std::size_t width(TokenType t) {
  switch (t) {
    case TokenType::u8:
    case TokenType::i8: return 1;
    case TokenType::i16:
    case TokenType::u16: return 2;
    case TokenType::i32:
    case TokenType::u32: return 4;
    case TokenType::i64: return 8;
  }
  return 1;
}

// Index of the first token outside [0, vocab), or n.
template <class T>
std::size_t first_outside(const unsigned char* p, std::size_t n, std::int64_t vocab) {
  for (std::size_t i = 0; i < n; i++) {
    const auto v = static_cast<std::int64_t>(load<T>(p + i * sizeof(T)));
    if (v < 0 || v >= vocab) return i;
  }
  return n;
}

constexpr std::int32_t kLlmcMagicGpt2 = 20240520, kLlmcMagicLlama3 = 20240801;
constexpr std::size_t kLlmcHeaderBytes = 256 * sizeof(std::int32_t);
constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::size_t kMegatronHeaderBytes = 9 + 8 + 1 + 8 + 8;

// Megatron's DType codes (indexed_dataset.py); 6 and 7 are float64 and float32, which hold no token ids.
bool megatron_type(std::uint8_t code, TokenType& type) {
  switch (code) {
    case 1: type = TokenType::u8; return true;
    case 2: type = TokenType::i8; return true;
    case 3: type = TokenType::i16; return true;
    case 4: type = TokenType::i32; return true;
    case 5: type = TokenType::i64; return true;
    case 8: type = TokenType::u16; return true;
    default: return false;
  }
}

std::string printable(const unsigned char* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; i++) {
    char buf[8];
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\') {
      s += static_cast<char>(p[i]);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", p[i]);
      s += buf;
    }
  }
  return s;
}

// What a path that is not a regular file is, for messages.
std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a named pipe";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

}  // namespace

const char* type_name(TokenType type) {
  switch (type) {
    case TokenType::u8: return "uint8";
    case TokenType::i8: return "int8";
    case TokenType::i16: return "int16";
    case TokenType::u16: return "uint16";
    case TokenType::i32: return "int32";
    case TokenType::u32: return "uint32";
    case TokenType::i64: return "int64";
  }
  return "?";
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // Checked before opening: opening a named pipe waits for a writer (every rank hung on a FIFO as PREFIX.bin).
  struct stat before {};
  if (::stat(path.c_str(), &before) == 0 && !S_ISREG(before.st_mode)) {
    throw InputError(quoted(path) + " is not a regular file (" + file_kind(before.st_mode) + ")");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw InputError("cannot open " + quoted(path) + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(quoted(path) + " is not a regular file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw InputError("cannot map " + quoted(path) + ": " + std::strerror(err));
    data_ = static_cast<const unsigned char*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

std::int64_t TokenSpan::at(std::size_t i) const {
  const unsigned char* p = file->data() + offset + i * width(type);
  switch (type) {
    case TokenType::u8: return *p;
    case TokenType::i8: return load<std::int8_t>(p);
    case TokenType::i16: return load<std::int16_t>(p);
    case TokenType::u16: return load<std::uint16_t>(p);
    case TokenType::i32: return load<std::int32_t>(p);
    case TokenType::u32: return load<std::uint32_t>(p);
    case TokenType::i64: return load<std::int64_t>(p);
  }
  return 0;
}

TokenSpan TokenSpan::slice(std::size_t begin, std::size_t n) const {
  TokenSpan s = *this;
  s.offset += begin * width(type);
  s.first += begin;
  s.count = n;
  return s;
}

TokenSpan read_bytes_file(const std::string& path) {
  TokenSpan s;
  s.file = std::make_shared<const MappedFile>(path);
  s.count = s.file->size();
  return s;
}

TokenSpan read_llmc_shard(const std::string& path) {
  TokenSpan s;
  s.file = std::make_shared<const MappedFile>(path);
  const MappedFile& f = *s.file;
  if (f.size() < kLlmcHeaderBytes) {
    throw InputError(quoted(path) + " is " + num(f.size()) + " bytes, shorter than the " + num(kLlmcHeaderBytes) +
                     "-byte header (256 int32) of an llm.c token shard");
  }
  const auto magic = load<std::int32_t>(f.data()), version = load<std::int32_t>(f.data() + 4),
             tokens = load<std::int32_t>(f.data() + 8);
  int expected_version = 0;
  if (magic == kLlmcMagicGpt2) {
    expected_version = 1;
    s.type = TokenType::u16;
  } else if (magic == kLlmcMagicLlama3) {
    expected_version = 7;
    s.type = TokenType::u32;
  } else {
    throw InputError(quoted(path) + " is not an llm.c token shard: header magic " + std::to_string(magic) +
                     ", expected 20240520 (GPT-2, uint16 tokens) or 20240801 (Llama 3, uint32 tokens)");
  }
  if (version != expected_version) {
    throw InputError(quoted(path) + ": llm.c header version " + std::to_string(version) + " with magic " +
                     std::to_string(magic) + ", expected version " + std::to_string(expected_version));
  }
  const std::size_t need = kLlmcHeaderBytes + static_cast<std::size_t>(tokens < 0 ? 0 : tokens) * width(s.type);
  if (tokens < 0 || f.size() != need) {
    throw InputError(quoted(path) + ": the llm.c header says " + std::to_string(tokens) + " tokens of " +
                     num(width(s.type)) + " bytes (" + num(need) + " bytes with the header) but the file has " +
                     num(f.size()) + " bytes (truncated, or not written by write_datafile)");
  }
  s.offset = kLlmcHeaderBytes;
  s.count = static_cast<std::size_t>(tokens);
  return s;
}

namespace {

// The checked index of a Megatron dataset: its token type and the total token count of its sequences.
struct MegatronIndex {
  TokenType type = TokenType::u16;
  std::uint64_t tokens = 0;
};

void check_megatron_documents(const MappedFile& f, const unsigned char* docs, std::uint64_t d, std::uint64_t s) {
  for (std::uint64_t i = 0; i < d; i++) {
    const auto v = load<std::int64_t>(docs + i * 8);
    const auto prev = i == 0 ? std::int64_t{0} : load<std::int64_t>(docs + (i - 1) * 8);
    const bool bad = (i == 0 && v != 0) || v < prev || static_cast<std::uint64_t>(v) > s ||
                     (i + 1 == d && v != static_cast<std::int64_t>(s));
    if (bad) {
      throw InputError(quoted(f.path()) + ": document index " + num(i) + " is " + std::to_string(v) +
                       "; the document indices must rise from 0 to the sequence count " + num(s));
    }
  }
}

MegatronIndex read_megatron_index(const MappedFile& f) {
  if (f.size() < kMegatronHeaderBytes) {
    throw InputError(quoted(f.path()) + " is " + num(f.size()) + " bytes, shorter than the " +
                     num(kMegatronHeaderBytes) + "-byte header of a Megatron indexed-dataset index");
  }
  const unsigned char* p = f.data();
  if (std::memcmp(p, kMegatronMagic, sizeof kMegatronMagic) != 0) {
    throw InputError(quoted(f.path()) + " is not a Megatron indexed-dataset index: it starts with \"" +
                     printable(p, 9) + "\", expected \"MMIDIDX\\x00\\x00\"");
  }
  const auto version = load<std::uint64_t>(p + 9);
  if (version != 1) throw InputError(quoted(f.path()) + ": index version " + num(version) + ", expected 1");
  MegatronIndex index;
  const std::uint8_t code = p[17];
  if (!megatron_type(code, index.type)) {
    throw InputError(quoted(f.path()) + ": token dtype code " + num(code) +
                     " is not an integer type (expected 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64 or 8 uint16)");
  }
  const auto s = load<std::uint64_t>(p + 18), d = load<std::uint64_t>(p + 26);
  const std::uint64_t limit = f.size();  // each entry takes at least 4 bytes: counts above size are truncation
  const std::uint64_t need = s > limit || d > limit ? ~std::uint64_t{0} : kMegatronHeaderBytes + 12 * s + 8 * d;
  if (need > f.size() || d == 0) {
    throw InputError(quoted(f.path()) + ": the header says " + num(s) + " sequences and " + num(d) +
                     " document indices, which need " + (need == ~std::uint64_t{0} ? "more" : num(need)) +
                     " bytes, but the file has " + num(f.size()) + " (truncated?)");
  }
  const unsigned char* sizes = p + kMegatronHeaderBytes;
  const unsigned char* pointers = sizes + 4 * s;
  const std::size_t w = width(index.type);
  for (std::uint64_t i = 0; i < s; i++) {
    const auto size = load<std::int32_t>(sizes + i * 4);
    const auto pointer = load<std::int64_t>(pointers + i * 8);
    if (size < 0 || pointer != static_cast<std::int64_t>(index.tokens * w)) {
      throw InputError(quoted(f.path()) + ": sequence " + num(i) + " has " + std::to_string(size) + " tokens at byte " +
                       std::to_string(pointer) + ", expected a size >= 0 at byte " + num(index.tokens * w) +
                       " (sequences stored back to back, as Megatron's builder writes them)");
    }
    index.tokens += static_cast<std::uint64_t>(size);
  }
  check_megatron_documents(f, pointers + 8 * s, d, s);
  return index;
}

}  // namespace

TokenSpan read_megatron_dataset(const std::string& prefix) {
  const MappedFile idx(prefix + ".idx");
  const MegatronIndex index = read_megatron_index(idx);
  TokenSpan s;
  s.file = std::make_shared<const MappedFile>(prefix + ".bin");
  s.type = index.type;
  s.count = index.tokens;
  const std::uint64_t need = index.tokens * width(index.type);
  if (s.file->size() != need) {
    throw InputError(quoted(s.name()) + " has " + num(s.file->size()) + " bytes but " + quoted(idx.path()) +
                     " describes " + num(index.tokens) + " tokens of " + num(width(index.type)) +
                     " bytes = " + num(need) + " bytes (truncated, or .bin and .idx of different datasets)");
  }
  return s;
}

void check_token_ids(const TokenSpan& span, int vocab, const std::string& key) {
  const unsigned char* p = span.file->data() + span.offset;
  std::size_t bad = span.count;
  switch (span.type) {
    case TokenType::u8: bad = first_outside<std::uint8_t>(p, span.count, vocab); break;
    case TokenType::i8: bad = first_outside<std::int8_t>(p, span.count, vocab); break;
    case TokenType::i16: bad = first_outside<std::int16_t>(p, span.count, vocab); break;
    case TokenType::u16: bad = first_outside<std::uint16_t>(p, span.count, vocab); break;
    case TokenType::i32: bad = first_outside<std::int32_t>(p, span.count, vocab); break;
    case TokenType::u32: bad = first_outside<std::uint32_t>(p, span.count, vocab); break;
    case TokenType::i64: bad = first_outside<std::int64_t>(p, span.count, vocab); break;
  }
  if (bad == span.count) return;
  throw InputError(key + ": " + quoted(span.name()) + " holds token id " + std::to_string(span.at(bad)) + " (token " +
                   num(span.first + bad) + " of the file), outside model.vocab = " + std::to_string(vocab) +
                   ": every token id must be in [0, model.vocab); set model.vocab to the "
                   "tokenizer's vocabulary (50257 for GPT-2)");
}

}  // namespace conductor::model
