// The store's wire format and the blocking socket helpers its server, client and liveness link share
// (protocol summary in store.h).
//
// Frame: u32 length + payload (little-endian); payload = u8 op + the op's fields; a string is u32 length
// + bytes. decode() is the one reader of a peer's payload bytes: it accepts exactly one canonical
// encoding per message (encode(decode(p)) == p) and rejects everything else with a one-line reason.
//
//   request                           reply
//   SET     key, value                OK
//   GET     u32 timeout_ms, key       VALUE value | MISSING [key]
//   WAIT    u32 timeout_ms, keys      OK | MISSING keys
//   HELLO   u32 rank, host            OK | REFUSED reason
//   BEAT                              VERDICT text ("" while healthy)
//   FAIL    message                   VERDICT text (the job's verdict: the first one wins)
//   BYE                               OK
//   (keys = u32 count + count strings)
//
// Before any of these, every connection authenticates (distributed/auth.h): the server sends CHALLENGE
// nonce, the client AUTH u32 rank, nonce, mac, the server PROOF mac (or REFUSED). Nonces and macs
// are exactly 32 bytes.
//
// Each op has its own payload limit (max_payload), checked on the op byte before the rest of the frame
// is read; the payload is then read as it arrives, so a peer that announces a large frame and sends
// little costs what it sent, not what it announced.
//
// The socket helpers never block without a deadline: every send/recv goes through poll(), with an
// optional stop fd (a StopLatch) that cuts the wait short when the owner shuts down.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ar::dist::frame {

inline constexpr uint32_t kMaxKey = 4096;         // keys and host names
inline constexpr uint32_t kMaxKeys = 1u << 16;    // keys in one WAIT / MISSING (bounds the decoder's allocation)
inline constexpr uint32_t kMaxValue = 16u << 20;  // one stored value (the job's largest is an identity of a few KiB)
inline constexpr uint32_t kMaxText = 64u << 10;   // FAIL, VERDICT, REFUSED text
inline constexpr uint32_t kMaxList = 1u << 20;    // a WAIT / MISSING payload
inline constexpr uint32_t kAuthBytes = 32;        // a nonce or a mac
// The largest payload of any op (a SET of the largest key and value); a larger length prefix is refused unread.
inline constexpr uint32_t kMaxFrame = 1 + 4 + kMaxKey + 4 + kMaxValue;

enum class Op : uint8_t {
  Set = 1, Get = 2, Wait = 3, Hello = 4, Beat = 5, Fail = 6, Bye = 7, Auth = 8,  // requests
  Ok = 0x80, Value = 0x81, Missing = 0x82, Verdict = 0x83, Refused = 0x84,  // replies
  Challenge = 0x85, Proof = 0x86,
};
const char* op_name(Op op);  // "SET", ..., "?" for a value outside the enum
// The largest payload (op byte included) a frame of this op may have; 0 for a value outside the enum.
uint32_t max_payload(Op op);

// One request or reply; each op uses the fields named in the table above, the others stay empty.
struct Message {
  Op op = Op::Ok;
  std::string key;                // SET, GET
  std::string value;              // SET, VALUE
  std::vector<std::string> keys;  // WAIT, MISSING
  std::string text;               // HELLO host, FAIL message, VERDICT, REFUSED reason
  uint32_t number = 0;            // GET/WAIT timeout in ms, HELLO rank, AUTH claimed rank
  // AUTH: key = client nonce, value = mac; CHALLENGE: value = server nonce; PROOF: value = mac.
  bool operator==(const Message&) const = default;
};

struct Decoded {
  Message msg;
  std::string error;  // why the payload was rejected; "" when msg is valid
  bool ok() const { return error.empty(); }
};

// Pure: any byte string in, a message or a reason out (unknown op, truncated field, trailing bytes,
// payload > kMaxFrame, key or host > kMaxKey, more than kMaxKeys keys). Never throws for malformed input.
Decoded decode(std::string_view payload);
// The whole frame (length prefix + payload). The caller keeps keys within kMaxKey and the frame within
// kMaxFrame (checked by check_request, which clients call before sending).
std::string encode(const Message& m);
// "" if the server would accept m's sizes, else the reason ("key of 5000 bytes exceeds 4096").
std::string check_request(const Message& m);
// "" if a received length prefix is acceptable, else the reason.
std::string check_frame_length(uint32_t length);
// "" if a frame of `length` payload bytes starting with op byte `op` is acceptable, else the reason.
std::string check_frame(uint8_t op, uint32_t length);

// ---- blocking socket helpers ----

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();

enum class IoStatus { Ok, Closed, TimedOut, Stopped, Failed, Malformed };
struct IoResult {
  IoStatus status = IoStatus::Ok;
  std::string what;  // strerror text or the decoder's reason, for Failed / Malformed
  bool ok() const { return status == IoStatus::Ok; }
  std::string describe() const;  // "connection closed by the peer", "timed out", "Connection reset by peer"
};

// A pipe whose read end turns readable for good once fire() ran: a poll() on fd() wakes every thread
// blocked in the helpers below, so an owner can stop its threads without closing fds under them.
class StopLatch {
 public:
  StopLatch();  // throws ar::Error (Io) if the pipe cannot be made
  ~StopLatch();
  StopLatch(const StopLatch&) = delete;
  StopLatch& operator=(const StopLatch&) = delete;
  void fire();  // idempotent
  bool fired() const;
  int fd() const { return read_fd_; }

 private:
  int read_fd_ = -1, write_fd_ = -1;
};

// Sends every byte (MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE).
IoResult send_all(int fd, std::string_view bytes, Deadline dl, int stop_fd = -1);
// Receives exactly n bytes; Closed if the peer closes first (even mid-way).
IoResult recv_exact(int fd, char* buf, size_t n, Deadline dl, int stop_fd = -1);
// How long a receiver waits, and for what.
struct RecvLimits {
  Deadline start = kNoDeadline;  // for the frame's first byte (an idle connection between requests)
  Deadline whole = kNoDeadline;  // for the whole frame, however it started
  // > 0: once the first byte arrived, the rest of the frame must within this (a slow or stalled peer
  // cannot hold a half frame open).
  std::chrono::milliseconds frame{0};
  bool auth_only = false;  // before authentication: anything but an AUTH frame is refused unread
};
// One frame: the length prefix and op byte (checked against max_payload before anything is allocated),
// the payload as it arrives, decoded.
IoResult recv_message(int fd, Message& out, const RecvLimits& lim, int stop_fd = -1);
IoResult recv_message(int fd, Message& out, Deadline dl, int stop_fd = -1);  // start = whole = dl
// send + receive of one request on a client connection.
IoResult exchange(int fd, const Message& request, Message& reply, Deadline dl, int stop_fd = -1);

// Connects to host:port (getaddrinfo: names, IPv4, IPv6), retrying every ~150 ms until `timeout`; then
// throws ar::Error (Io) "cannot reach the rendezvous at host:port within N s: <reason>". The socket is
// non-blocking (the helpers above poll) with TCP_NODELAY, close-on-exec.
int connect_with_retries(const std::string& host, int port, std::chrono::milliseconds timeout);

std::string host_port(const std::string& host, int port);  // "h:29500", "[::1]:29500"
std::string seconds_text(std::chrono::milliseconds d);      // "30 s", "0.25 s"
Deadline deadline_after(std::chrono::milliseconds d);       // saturates instead of overflowing
uint32_t clamp_ms(std::chrono::milliseconds d);             // a timeout as the wire's u32 milliseconds

}  // namespace ar::dist::frame
