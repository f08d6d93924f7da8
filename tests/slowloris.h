// Strangers on a rendezvous port, for the tests of the store's bounds (test_dist_store, test_dist_job):
// a slowloris that holds `per_address` connections open from each of several loopback source addresses
// (127.0.0.2 and so on are this host's too), each sending half a length prefix and then nothing, and
// reopens every connection the store closes (an eviction, the authentication deadline) at once, until
// it is destroyed.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace ar::test {

// A TCP connection from the loopback address `source` to 127.0.0.1:port; -1 while nothing listens.
inline int connect_from(const std::string& source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{}, to{};
  from.sin_family = to.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  to.sin_port = htons(uint16_t(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class Slowloris {
 public:
  Slowloris(int port, std::vector<std::string> sources, int per_address)
      : port_(port), sources_(std::move(sources)), per_address_(per_address) {
    thread_ = std::thread([this] { run(); });
  }
  ~Slowloris() {
    stop_ = true;
    thread_.join();
  }
  Slowloris(const Slowloris&) = delete;
  Slowloris& operator=(const Slowloris&) = delete;
  int opened() const { return opened_.load(); }  // connections the store accepted so far
  int held() const { return held_.load(); }      // open now

 private:
  int open_from(const std::string& source) const {
    const int fd = connect_from(source, port_);
    if (fd >= 0) (void)!::send(fd, "\x10\x00", 2, MSG_NOSIGNAL);  // half a length prefix
    return fd;
  }
  static bool closed_by_peer(int fd) {
    pollfd p{fd, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
  }
  void run() {
    std::vector<int> fds(sources_.size() * size_t(per_address_), -1);
    while (!stop_) {
      int held = 0;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i] >= 0 && closed_by_peer(fds[i])) {
          ::close(fds[i]);
          fds[i] = -1;
        }
        if (fds[i] < 0 && (fds[i] = open_from(sources_[i / size_t(per_address_)])) >= 0) ++opened_;
        held += fds[i] >= 0;
      }
      held_ = held;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }

  int port_;
  std::vector<std::string> sources_;
  int per_address_;
  std::atomic<bool> stop_{false};
  std::atomic<int> opened_{0}, held_{0};
  std::thread thread_;
};

// 127.0.0.1 (the ranks' own address) and `extra` more loopback addresses: 127.0.0.2, 127.0.0.3, ...
inline std::vector<std::string> loopback_sources(int extra) {
  std::vector<std::string> s = {"127.0.0.1"};
  for (int i = 0; i < extra; ++i) s.push_back("127.0.0." + std::to_string(2 + i));
  return s;
}

}  // namespace ar::test
