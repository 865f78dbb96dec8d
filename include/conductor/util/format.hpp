#pragma once
// The one way a double becomes text outside fixed-width log columns (the resolved deck, deck messages): the
// shortest digits that read back as the same double, so `lr: 0.006` prints 0.006, never 0.0060000000000000001.
// JSON goes through nlohmann-json, whose numbers are shortest round-trip doubles as well.
#include <cstddef>
#include <string>

namespace conductor {

// Plain notation for 1e-5 <= |v| < 1e17 and zero (1000000, 0.006, 12.5), scientific otherwise (1e-07,
// 2.5e+20), as %.17g chooses; "nan", "inf", "-inf" for non-finite values.
std::string format_double(double v);

// A piece of a user's file quoted in a message: bytes outside printable ASCII as \xNN (a binary file's bytes would
// reach the terminal raw) and at most `max_chars` of it, then "...".
std::string printable(const std::string& text, std::size_t max_chars = 60);

// What a user wrote (a key, an override, a deck's value) as a message quotes it: as written, unless it is long (a
// 100 KB value would fill the screen), holds control bytes (an escape sequence would reach the terminal) or is not
// UTF-8 (the terminal would garble it): then printable() of its first 160 characters.
std::string shown(const std::string& text);

// A number of an environment variable as people write it: a plain decimal ("5", "0.5", ".5", "+2", "1e3"), no
// blanks, sign '-', hexadecimal, "inf" or "nan" (strtod reads all of those). -1 where `text` is not one, or does
// not fit a double (1e400; 1e-400, which would read as 0; a subnormal such as 1e-320 is read).
double parse_plain_decimal(const std::string& text);

// A file's path as a message quotes it: 'PATH', whole however long, as written when it is UTF-8 without control
// bytes, else printable() (a name from a glob may hold any byte but '/' and NUL).
std::string quoted_path(const std::string& path);

// Where `text` holds its first control byte (below 0x20, or DEL), or npos when it holds none: such bytes in a
// name or a quoted key would move the terminal's cursor or start an escape sequence.
std::size_t control_byte_at(const std::string& text);

// Where `text` stops being UTF-8 (the byte offset of the first sequence that is not one), or npos when it is.
std::size_t utf8_error_at(const std::string& text);

}  // namespace conductor
