#pragma once
// Writers of the tokenized formats conductor reads (model/token_files.hpp), for tests: llm.c shards as
// dev/data/data_common.py write_datafile writes them, Megatron indexed datasets as IndexedDatasetBuilder does.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace token_files_test {

template <class T>
void put(std::ofstream& out, T v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}

// An llm.c shard: 256 int32 (magic, version, token count, zeros) then the tokens as uint16 (or uint32 with
// width 4, magic 20240801, version 7).
inline void write_llmc(const std::string& path, const std::vector<int>& tokens, std::int32_t magic = 20240520,
                       std::int32_t version = 1, int width = 2) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::vector<std::int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<std::int32_t>(tokens.size());
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  for (int t : tokens) {
    if (width == 2)
      put(out, static_cast<std::uint16_t>(t));
    else
      put(out, static_cast<std::uint32_t>(t));
  }
}

// A Megatron dataset PREFIX.bin / PREFIX.idx with one sequence per document, uint16 tokens (dtype code 8) or
// int32 (code 4).
inline void write_megatron(const std::string& prefix, const std::vector<std::vector<int>>& documents,
                           std::uint8_t code = 8) {
  const int width = code == 8 ? 2 : 4;
  std::ofstream bin(prefix + ".bin", std::ios::binary | std::ios::trunc);
  for (const auto& d : documents) {
    for (int t : d) {
      if (width == 2)
        put(bin, static_cast<std::uint16_t>(t));
      else
        put(bin, static_cast<std::int32_t>(t));
    }
  }
  std::ofstream idx(prefix + ".idx", std::ios::binary | std::ios::trunc);
  idx.write("MMIDIDX\0\0", 9);
  put(idx, std::uint64_t{1});
  put(idx, code);
  put(idx, static_cast<std::uint64_t>(documents.size()));
  put(idx, static_cast<std::uint64_t>(documents.size() + 1));
  for (const auto& d : documents) put(idx, static_cast<std::int32_t>(d.size()));
  std::int64_t pointer = 0;
  for (const auto& d : documents) {
    put(idx, pointer);
    pointer += static_cast<std::int64_t>(d.size()) * width;
  }
  for (std::size_t i = 0; i <= documents.size(); i++) put(idx, static_cast<std::int64_t>(i));
}

// Overwrites `bytes` at `offset` of an existing file (to corrupt a header).
inline void patch(const std::string& path, std::size_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Cuts a file to `size` bytes.
inline void truncate_to(const std::string& path, std::size_t size) {
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(all.data(), static_cast<std::streamsize>(std::min(size, all.size())));
}

}  // namespace token_files_test
