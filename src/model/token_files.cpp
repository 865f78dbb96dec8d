// Tokenized corpora on disk (token_files.hpp).
#include "conductor/model/token_files.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "conductor/util/checksum.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/fd.hpp"
#include "conductor/util/format.hpp"

namespace conductor::model {

namespace {

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

namespace {

// open() of a data file; a run over more shards than the soft limit of open files raises it to the hard limit
// once (every file stays open for the run: what it reads is the file it checked, even if it is replaced).
int open_data_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno == EMFILE) {
    struct rlimit lim {};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
      lim.rlim_cur = lim.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    }
    if (fd < 0 && errno == EMFILE) {
      throw InputError("cannot open " + quoted_path(path) +
                       ": too many open files (every data file stays open during the run; raise `ulimit -n`)");
    }
  }
  return fd;
}

}  // namespace

DataFile::DataFile(const std::string& path) : path_(path) {
  // Checked before opening: opening a named pipe waits for a writer (every rank hung on a FIFO as PREFIX.bin).
  struct stat before {};
  if (::stat(path.c_str(), &before) == 0 && !S_ISREG(before.st_mode)) {
    throw InputError(quoted_path(path) + " is not a regular file (" + file_kind(before.st_mode) + ")");
  }
  util::Fd fd(open_data_file(path));
  if (fd.get() < 0) throw InputError("cannot open " + quoted_path(path) + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw InputError(quoted_path(path) + " is not a regular file");
  fd_ = std::move(fd);
  size_ = static_cast<std::size_t>(st.st_size);
}

void DataFile::read(std::size_t offset, std::size_t n, void* out) const {
  auto* p = static_cast<unsigned char*>(out);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_.get(), p + done, n - done, static_cast<off_t>(offset + done));
    if (got > 0) {
      done += static_cast<std::size_t>(got);
      continue;
    }
    const int err = errno;
    if (got < 0 && err == EINTR) continue;
    if (got < 0) {
      throw InputError("cannot read " + quoted_path(path_) + " at byte " + num(offset + done) + ": " +
                       std::strerror(err));
    }
    struct stat st {};
    const std::string now =
        ::fstat(fd_.get(), &st) == 0 ? num(static_cast<std::uint64_t>(st.st_size)) + " bytes" : "shorter";
    throw InputError(quoted_path(path_) + " is now " + now + ", but " + num(n) + " bytes at offset " + num(offset) +
                     " are needed; it had " + num(size_) +
                     " bytes when the run opened it (truncated or rewritten while the run reads it)");
  }
}

namespace {

template <class T>
void decode(const unsigned char* p, std::size_t n, int* out) {
  for (std::size_t i = 0; i < n; i++) out[i] = static_cast<int>(static_cast<std::int64_t>(load<T>(p + i * sizeof(T))));
}

}  // namespace

std::int64_t TokenSpan::at(std::size_t i) const {
  unsigned char b[8];
  file->read(offset + i * width(type), width(type), b);
  switch (type) {
    case TokenType::u8: return b[0];
    case TokenType::i8: return load<std::int8_t>(b);
    case TokenType::i16: return load<std::int16_t>(b);
    case TokenType::u16: return load<std::uint16_t>(b);
    case TokenType::i32: return load<std::int32_t>(b);
    case TokenType::u32: return load<std::uint32_t>(b);
    case TokenType::i64: return load<std::int64_t>(b);
  }
  return 0;
}

void TokenSpan::copy(std::size_t begin, std::size_t n, int* out) const {
  const std::size_t w = width(type);
  thread_local std::vector<unsigned char> buf;
  buf.resize(n * w);
  file->read(offset + begin * w, n * w, buf.data());
  const unsigned char* p = buf.data();
  switch (type) {
    case TokenType::u8: decode<std::uint8_t>(p, n, out); break;
    case TokenType::i8: decode<std::int8_t>(p, n, out); break;
    case TokenType::i16: decode<std::int16_t>(p, n, out); break;
    case TokenType::u16: decode<std::uint16_t>(p, n, out); break;
    case TokenType::i32: decode<std::int32_t>(p, n, out); break;
    case TokenType::u32: decode<std::uint32_t>(p, n, out); break;
    case TokenType::i64: decode<std::int64_t>(p, n, out); break;
  }
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
  s.file = std::make_shared<const DataFile>(path);
  s.count = s.file->size();
  return s;
}

TokenSpan read_llmc_shard(const std::string& path) {
  TokenSpan s;
  s.file = std::make_shared<const DataFile>(path);
  const DataFile& f = *s.file;
  if (f.size() < kLlmcHeaderBytes) {
    throw InputError(quoted_path(path) + " is " + num(f.size()) + " bytes, shorter than the " + num(kLlmcHeaderBytes) +
                     "-byte header (256 int32) of an llm.c token shard");
  }
  unsigned char header[12];
  f.read(0, sizeof header, header);
  const auto magic = load<std::int32_t>(header), version = load<std::int32_t>(header + 4),
             tokens = load<std::int32_t>(header + 8);
  int expected_version = 0;
  if (magic == kLlmcMagicGpt2) {
    expected_version = 1;
    s.type = TokenType::u16;
  } else if (magic == kLlmcMagicLlama3) {
    expected_version = 7;
    s.type = TokenType::u32;
  } else {
    throw InputError(quoted_path(path) + " is not an llm.c token shard: header magic " + std::to_string(magic) +
                     ", expected 20240520 (GPT-2, uint16 tokens) or 20240801 (Llama 3, uint32 tokens)");
  }
  if (version != expected_version) {
    throw InputError(quoted_path(path) + ": llm.c header version " + std::to_string(version) + " with magic " +
                     std::to_string(magic) + ", expected version " + std::to_string(expected_version));
  }
  const std::size_t need = kLlmcHeaderBytes + static_cast<std::size_t>(tokens < 0 ? 0 : tokens) * width(s.type);
  if (tokens < 0 || f.size() != need) {
    throw InputError(quoted_path(path) + ": the llm.c header says " + std::to_string(tokens) + " tokens of " +
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

// The values of an array of little-endian T at `offset` of a file, read in pieces of up to 64 Ki values.
template <class T>
class Values {
 public:
  Values(const DataFile& f, std::size_t offset, std::uint64_t n) : f_(f), offset_(offset), n_(n) {}
  T operator[](std::uint64_t i) {
    if (i < begin_ || i >= begin_ + have_) {
      begin_ = i;
      have_ = std::min<std::uint64_t>(kPiece, n_ - i);
      buf_.resize(static_cast<std::size_t>(have_) * sizeof(T));
      f_.read(offset_ + static_cast<std::size_t>(i) * sizeof(T), buf_.size(), buf_.data());
    }
    return load<T>(buf_.data() + static_cast<std::size_t>(i - begin_) * sizeof(T));
  }

 private:
  static constexpr std::uint64_t kPiece = 1 << 16;
  const DataFile& f_;
  std::size_t offset_;
  std::uint64_t n_, begin_ = 0, have_ = 0;
  std::vector<unsigned char> buf_;
};

void check_megatron_documents(const DataFile& f, std::size_t offset, std::uint64_t d, std::uint64_t s) {
  Values<std::int64_t> docs(f, offset, d);
  std::int64_t prev = 0;
  for (std::uint64_t i = 0; i < d; i++) {
    const std::int64_t v = docs[i];
    const bool bad = (i == 0 && v != 0) || v < prev || static_cast<std::uint64_t>(v) > s ||
                     (i + 1 == d && v != static_cast<std::int64_t>(s));
    if (bad) {
      throw InputError(quoted_path(f.path()) + ": document index " + num(i) + " is " + std::to_string(v) +
                       "; the document indices must rise from 0 to the sequence count " + num(s));
    }
    prev = v;
  }
}

MegatronIndex read_megatron_index(const DataFile& f) {
  if (f.size() < kMegatronHeaderBytes) {
    throw InputError(quoted_path(f.path()) + " is " + num(f.size()) + " bytes, shorter than the " +
                     num(kMegatronHeaderBytes) + "-byte header of a Megatron indexed-dataset index");
  }
  unsigned char p[kMegatronHeaderBytes];
  f.read(0, sizeof p, p);
  if (std::memcmp(p, kMegatronMagic, sizeof kMegatronMagic) != 0) {
    throw InputError(quoted_path(f.path()) + " is not a Megatron indexed-dataset index: it starts with \"" +
                     printable(p, 9) + "\", expected \"MMIDIDX\\x00\\x00\"");
  }
  const auto version = load<std::uint64_t>(p + 9);
  if (version != 1) throw InputError(quoted_path(f.path()) + ": index version " + num(version) + ", expected 1");
  MegatronIndex index;
  const std::uint8_t code = p[17];
  if (!megatron_type(code, index.type)) {
    throw InputError(quoted_path(f.path()) + ": token dtype code " + num(code) +
                     " is not an integer type (expected 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64 or 8 uint16)");
  }
  const auto s = load<std::uint64_t>(p + 18), d = load<std::uint64_t>(p + 26);
  const std::uint64_t limit = f.size();  // each entry takes at least 4 bytes: counts above size are truncation
  const std::uint64_t need = s > limit || d > limit ? ~std::uint64_t{0} : kMegatronHeaderBytes + 12 * s + 8 * d;
  if (d == 0) {
    // Megatron's builder always writes the first document's start (0), so no index has none: not truncation.
    throw InputError(quoted_path(f.path()) + ": the header says " + num(s) +
                     " sequences and 0 document indices; an index lists at least the first document's start "
                     "(0): not written by Megatron's builder, or its header is damaged");
  }
  if (need > f.size()) {
    throw InputError(quoted_path(f.path()) + ": the header says " + num(s) + " sequences and " + num(d) +
                     " document indices, which need " + (need == ~std::uint64_t{0} ? "more" : num(need)) +
                     " bytes, but the file has " + num(f.size()) + " (truncated?)");
  }
  Values<std::int32_t> sizes(f, kMegatronHeaderBytes, s);
  Values<std::int64_t> pointers(f, kMegatronHeaderBytes + 4 * s, s);
  const std::size_t w = width(index.type);
  for (std::uint64_t i = 0; i < s; i++) {
    const std::int32_t size = sizes[i];
    const std::int64_t pointer = pointers[i];
    if (size < 0) {
      throw InputError(quoted_path(f.path()) + ": sequence " + num(i) + " has " + std::to_string(size) +
                       " tokens; a size is >= 0");
    }
    if (pointer != static_cast<std::int64_t>(index.tokens * w)) {
      // Sequences are stored back to back (as Megatron's builder writes them), so a start off the previous
      // sequence's end is either that one's size or this one's pointer: both are named.
      const std::string after = i == 0 ? "the first sequence starts at byte 0"
                                       : "sequence " + num(i - 1) + " (" + std::to_string(sizes[i - 1]) +
                                             " tokens from byte " + std::to_string(pointers[i - 1]) +
                                             ") ends at byte " + num(index.tokens * w);
      throw InputError(quoted_path(f.path()) + ": sequence " + num(i) + " starts at byte " + std::to_string(pointer) +
                       ", but " + after + " (sequences stored back to back, as Megatron's builder writes them: " +
                       (i == 0 ? "its pointer" : "that size or this pointer") + " is wrong)");
    }
    index.tokens += static_cast<std::uint64_t>(size);
  }
  check_megatron_documents(f, kMegatronHeaderBytes + 12 * s, d, s);
  return index;
}

}  // namespace

TokenSpan read_megatron_dataset(const std::string& prefix) {
  const DataFile idx(prefix + ".idx");
  const MegatronIndex index = read_megatron_index(idx);
  TokenSpan s;
  s.file = std::make_shared<const DataFile>(prefix + ".bin");
  s.type = index.type;
  s.count = index.tokens;
  const std::uint64_t need = index.tokens * width(index.type);
  if (s.file->size() != need) {
    throw InputError(quoted_path(s.name()) + " has " + num(s.file->size()) + " bytes but " + quoted_path(idx.path()) +
                     " describes " + num(index.tokens) + " tokens of " + num(width(index.type)) +
                     " bytes = " + num(need) + " bytes (truncated, or .bin and .idx of different datasets)");
  }
  return s;
}

DataFileIdentity scan_token_file(const TokenSpan& span, int vocab, const std::string& key) {
  const DataFile& f = *span.file;
  const std::size_t w = width(span.type), begin = span.offset, end = span.offset + span.count * w;
  constexpr std::size_t kPiece = std::size_t{1} << 20;  // a multiple of every token width, as span.offset is
  std::vector<unsigned char> buf(std::min(kPiece, f.size()));
  std::uint32_t crc = 0;
  for (std::size_t at = 0; at < f.size(); at += kPiece) {
    const std::size_t n = std::min(kPiece, f.size() - at);
    try {
      f.read(at, n, buf.data());
    } catch (const InputError& e) {
      throw InputError(key + ": " + e.what());  // a file shortened while the start-up scan reads it
    }
    crc = util::crc32(buf.data(), n, crc);
    // The tokens of the span in this piece.
    const std::size_t lo = std::max(at, begin), hi = std::min(at + n, end);
    if (lo >= hi) continue;
    const unsigned char* p = buf.data() + (lo - at);
    const std::size_t count = (hi - lo) / w;
    std::size_t bad = count;
    switch (span.type) {
      case TokenType::u8: bad = first_outside<std::uint8_t>(p, count, vocab); break;
      case TokenType::i8: bad = first_outside<std::int8_t>(p, count, vocab); break;
      case TokenType::i16: bad = first_outside<std::int16_t>(p, count, vocab); break;
      case TokenType::u16: bad = first_outside<std::uint16_t>(p, count, vocab); break;
      case TokenType::i32: bad = first_outside<std::int32_t>(p, count, vocab); break;
      case TokenType::u32: bad = first_outside<std::uint32_t>(p, count, vocab); break;
      case TokenType::i64: bad = first_outside<std::int64_t>(p, count, vocab); break;
    }
    if (bad == count) continue;
    const std::size_t token = (lo - begin) / w + bad;
    throw InputError(key + ": " + quoted_path(span.name()) + " holds token id " + std::to_string(span.at(token)) +
                     " (token " + num(span.first + token) +
                     " of the file), outside model.vocab = " + std::to_string(vocab) +
                     ": every token id must be in [0, model.vocab); set model.vocab to the "
                     "tokenizer's vocabulary (50257 for GPT-2)");
  }
  return DataFileIdentity{f.path(), f.size(), crc};
}

}  // namespace conductor::model
