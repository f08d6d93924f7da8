// Bytes from input files (architecture names, tensor names, JSON keys and values, GGUF strings, tokens,
// file names from an index) are untrusted. Put raw into a message they could clear the screen or move
// the cursor (ESC sequences), start a line that looks like our own `error:` (\n, \r), or cut the message
// short (NUL, since messages end up as C strings). printable() is the one function that makes such
// bytes safe to print; the error and log sinks apply it to every whole message as a safety net.
#pragma once
#include <string>
#include <string_view>

namespace ar {

// `s` with every byte that is not part of a printable, well-formed UTF-8 character written as `\xNN`
// (two lower-case hex digits): C0 controls (NUL, \n, \r, ESC, ...), DEL, bytes of invalid UTF-8
// (stray continuation bytes, truncated, overlong or surrogate encodings, code points past U+10FFFF),
// and the encodings of C1 controls (U+0080..U+009F), the line/paragraph separators U+2028/U+2029 and
// the bidirectional controls (U+200E/F, U+202A..U+202E, U+2066..U+2069), which can make a line read
// as something else. Printable ASCII (backslash included) and other valid UTF-8 pass unchanged, so
// printable(printable(s)) == printable(s): escaping at a source and again at the sink is harmless.
std::string printable(std::string_view s);

}  // namespace ar
