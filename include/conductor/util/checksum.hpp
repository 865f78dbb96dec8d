#pragma once
// CRC-32 (zlib's, the checksum of gzip and zip) of files the run writes and later trusts: checkpoint files
// (model/checkpoint.hpp) and policy files (policy/policy.hpp). It detects torn writes, truncation and flipped
// bytes; it is not a defence against deliberate tampering.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace conductor::util {

// The CRC-32 of `bytes` bytes at `data`. Incremental: passing the CRC-32 of the bytes before them as `previous`
// gives the CRC-32 of the whole (a file checksummed in pieces); 0 starts afresh.
std::uint32_t crc32(const void* data, std::size_t bytes, std::uint32_t previous = 0);
// "0x1a2b3c4d": the form manifests and sidecar files hold.
std::string crc32_hex(std::uint32_t crc);
// Parses crc32_hex's form; false when `text` is not one.
bool parse_crc32_hex(const std::string& text, std::uint32_t& crc);

// The whole file's bytes; throws Error naming the file and the system's reason.
std::vector<unsigned char> read_file_bytes(const std::string& path);
// Writes `bytes` to `path` (created or truncated) and fsyncs it; every call is checked and a failure throws
// Error naming the file and the system's reason (e.g. "No space left on device").
void write_file_durably(const std::string& path, const void* data, std::size_t bytes);
// fsync of a folder: makes the names created or renamed in it durable.
void fsync_folder(const std::string& path);

}  // namespace conductor::util
