#include "src/client/data_group_watch.h"

#include <utility>

#include "src/client/server_status.h"

namespace heterodl {

DataGroupWatch::DataGroupWatch(ServerSources servers, std::string auth_token, TlsConfig tls,
                               absl::Duration soon, absl::Duration interval)
    : servers_(std::move(servers)),
      auth_token_(std::move(auth_token)),
      tls_(std::move(tls)),
      thread_([this, soon, interval] { Run(soon, interval); }) {}

DataGroupWatch::~DataGroupWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

std::optional<DataGroupCapacity> DataGroupWatch::capacity() const {
  absl::MutexLock lock(&mu_);
  return capacity_;
}

bool DataGroupWatch::AwaitRounds(int64_t rounds, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const auto done = [this, rounds]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return rounds_ >= rounds; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

bool DataGroupWatch::Sleep(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), duration);
  return !stopping_;
}

void DataGroupWatch::Run(absl::Duration soon, absl::Duration interval) {
  bool measured = false;
  while (Sleep(measured ? interval : soon)) {
    std::vector<v1::ServerStats> answers;
    const std::vector<std::string> servers = servers_.Refresh();
    for (const std::string& server : servers) {
      absl::StatusOr<v1::ServerStats> stats =
          FetchServerStatus(server, absl::Seconds(2), auth_token_, tls_);
      if (stats.ok()) {
        answers.push_back(*std::move(stats));
      }
    }
    const DataGroupCapacity round = MeasureDataGroup(answers);
    // Until every server is measured (one that has not built anything yet
    // cannot be), the next round comes soon.
    measured = round.hosts == static_cast<int>(servers.size());
    absl::MutexLock lock(&mu_);
    if (round.hosts > 0) {
      capacity_ = round;
    }
    ++rounds_;
  }
}

}  // namespace heterodl
