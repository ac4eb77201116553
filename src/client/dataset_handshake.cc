#include "src/client/dataset_handshake.h"

#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "src/client/endpoint_probe.h"
#include "src/client/server_channel.h"
#include "src/common/fingerprint.h"
#include "src/common/log.h"
#include "src/common/status_macros.h"
#include "src/rpc/grpc_status.h"
#include "src/wire/batch_layout.h"

namespace heterodl {
namespace {

// How long one attempt to reach a server may take (a refused connection
// fails at once), the pause between attempts, and how often a wait asks the
// caller whether it was interrupted.
constexpr absl::Duration kConnectAttempt = absl::Seconds(2);
constexpr absl::Duration kConnectRetryPause = absl::Milliseconds(250);
constexpr absl::Duration kInterruptPoll = absl::Milliseconds(200);
// How long the other servers get to answer once one has.
constexpr absl::Duration kStragglerGrace = absl::Seconds(2);

// Asks a server for its DatasetInfo until it answers, `deadline` passes or
// `abandon` is set: short attempts one after another (a refused connection
// fails one at once), so why a server does not answer is known, and said once
// per new reason, within seconds instead of at the deadline. UNAVAILABLE
// with the last reason; errors no retry can fix (a wrong token, a pipeline
// the server cannot parse) at once.
absl::StatusOr<v1::DatasetInfo> AwaitDatasetInfo(const ServerConnection& server,
                                                 absl::Time deadline,
                                                 const RemoteLoaderOptions& options,
                                                 const std::atomic<bool>& abandon,
                                                 const std::atomic<bool>& enough) {
  absl::Status last = absl::DeadlineExceededError("no answer");
  while (!abandon.load() && !enough.load()) {
    grpc::ClientContext context;
    AddAuthToken(context, options.auth_token);
    context.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + kConnectAttempt)));
    v1::DatasetInfoRequest request;
    request.set_pipeline(options.pipeline);
    v1::DatasetInfo info;
    const grpc::Status answer = server.GetDatasetInfo(&context, request, &info);
    if (answer.ok()) {
      return info;
    }
    const absl::Status error = FromGrpcStatus(answer);
    if (!absl::IsUnavailable(error) && !absl::IsDeadlineExceeded(error)) {
      return error;
    }
    if (absl::IsUnavailable(error) && error.message() != last.message()) {
      // Something that answers and is no data server will not become one.
      EndpointProbeOptions probe;
      probe.loader_uses_tls = options.tls.enabled();
      if (std::optional<std::string> wrong = ExplainWrongEndpoint(server.address(), probe)) {
        return absl::InvalidArgumentError(*wrong);
      }
      LogWarning("data server %s: %s; waiting up to %s for it", server.address(), error.message(),
                 absl::FormatDuration(options.connect_timeout));
    }
    if (absl::IsUnavailable(error) || !absl::IsUnavailable(last)) {
      last = error;
    }
    if (absl::Now() >= deadline) {
      break;
    }
    absl::SleepFor(kConnectRetryPause);
  }
  if (abandon.load()) {
    return absl::CancelledError("interrupted");
  }
  return absl::UnavailableError(last.message());
}

// How many askers have their answer.
struct AnswerCount {
  explicit AnswerCount(size_t expected) : expected(expected) {}
  bool AllAnswered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered == expected; }

  const size_t expected;
  absl::Mutex mu;
  size_t answered ABSL_GUARDED_BY(mu) = 0;
  absl::Time first_answer ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();  // a good one
};

// Each server's DatasetInfo, asked at once; CANCELLED as soon as options.interrupt_connect says so.
absl::StatusOr<std::vector<absl::StatusOr<v1::DatasetInfo>>> AskServers(
    const std::vector<const ServerConnection*>& servers, const RemoteLoaderOptions& options) {
  const size_t count = servers.size();
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  std::vector<absl::StatusOr<v1::DatasetInfo>> infos(count, absl::UnknownError("not asked"));
  std::atomic<bool> abandon{false};
  std::atomic<bool> enough{false};
  AnswerCount answers(count);
  std::vector<std::thread> askers;
  for (size_t i = 0; i < count; ++i) {
    askers.emplace_back([&, i] {
      absl::StatusOr<v1::DatasetInfo> info =
          AwaitDatasetInfo(*servers[i], deadline, options, abandon, enough);
      absl::MutexLock lock(&answers.mu);
      if (info.ok() && answers.first_answer == absl::InfiniteFuture()) {
        answers.first_answer = absl::Now();
      }
      infos[i] = std::move(info);
      ++answers.answered;
    });
  }
  bool interrupted = false;
  {
    absl::MutexLock lock(&answers.mu);
    while (!answers.AllAnswered()) {
      answers.mu.AwaitWithTimeout(absl::Condition(&answers, &AnswerCount::AllAnswered),
                                  kInterruptPoll);
      // One server is enough to start with; the others get a short grace
      // (a cluster starts its servers together) and are otherwise used once
      // they answer: a DNS name may list a pod that is already gone.
      if (absl::Now() - answers.first_answer > kStragglerGrace) {
        break;
      }
      if (answers.AllAnswered() || !options.interrupt_connect) {
        continue;
      }
      answers.mu.Unlock();  // the callback may take a while (Python's GIL)
      interrupted = options.interrupt_connect();
      answers.mu.Lock();
      if (interrupted) {
        break;
      }
    }
  }
  abandon.store(interrupted);
  enough.store(true);
  for (std::thread& asker : askers) {
    asker.join();
  }
  if (interrupted) {
    return absl::CancelledError("interrupted while waiting for data servers");
  }
  return infos;
}

// The first answer, once every answer names the same dataset. Fails naming
// the servers when none answered, or both sides of a mismatch; warns about
// those that did not answer yet (they are used once they come up).
absl::StatusOr<v1::DatasetInfo> AgreedDataset(
    const std::vector<const ServerConnection*>& servers,
    const std::vector<absl::StatusOr<v1::DatasetInfo>>& infos, absl::Duration waited) {
  std::optional<size_t> first;
  std::vector<std::string> unreachable;
  for (size_t i = 0; i < infos.size(); ++i) {
    const absl::Status& refused = infos[i].status();
    if (!refused.ok() && !absl::IsUnavailable(refused) && !absl::IsDeadlineExceeded(refused)) {
      // No retry changes this answer (a wrong token, a bad pipeline).
      return absl::Status(refused.code(), absl::StrCat("data server ", servers[i]->address(), ": ",
                                                       refused.message()));
    }
    if (!infos[i].ok()) {
      unreachable.push_back(
          absl::StrCat(servers[i]->address(), " (", infos[i].status().message(), ")"));
      continue;
    }
    if (!first) {
      first = i;
    } else if (infos[i]->fingerprint() != infos[*first]->fingerprint()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data servers serve different datasets: ", servers[*first]->address(), " has '",
          infos[*first]->source(), "' (fingerprint ",
          FingerprintToHex(infos[*first]->fingerprint()), ") but ", servers[i]->address(), " has '",
          infos[i]->source(), "' (fingerprint ", FingerprintToHex(infos[i]->fingerprint()), ")"));
    }
  }
  if (!first) {
    return absl::UnavailableError(absl::StrCat("no data server answered within ",
                                               absl::FormatDuration(waited), ": ",
                                               absl::StrJoin(unreachable, ", ")));
  }
  if (!unreachable.empty()) {
    LogWarning("data servers not reachable yet, will retry: %s", absl::StrJoin(unreachable, ", "));
  }
  return *infos[*first];
}

// Images uint8 [H, W, 3]: every batch's first field.
bool IsImagesField(const v1::FieldSpec& images) {
  return images.name() == "images" && !images.ragged() && images.dtype() == v1::DTYPE_UINT8 &&
         images.shape_size() == 3 && images.shape(2) == 3;
}

// A ragged field of `dtype` elements of `shape`.
bool IsRaggedField(const v1::FieldSpec& field, const char* name, v1::DType dtype,
                   std::initializer_list<uint32_t> shape) {
  return field.name() == name && field.ragged() && field.dtype() == dtype &&
         std::equal(field.shape().begin(), field.shape().end(), shape.begin(), shape.end());
}

// A detection batch's objects after its images: boxes float32 [4] xyxy,
// box_labels int64, iscrowd uint8, each a list per sample.
bool AreObjectFields(const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields) {
  return fields.size() == 4 && IsRaggedField(fields[1], "boxes", v1::DTYPE_FLOAT32, {4}) &&
         IsRaggedField(fields[2], "box_labels", v1::DTYPE_INT64, {}) &&
         IsRaggedField(fields[3], "iscrowd", v1::DTYPE_UINT8, {});
}

// Masks uint8 or int32 [H, W] of the images' size: a segmentation batch's.
bool IsMasksFieldOf(const v1::FieldSpec& masks, const v1::FieldSpec& images) {
  return masks.name() == "masks" && !masks.ragged() &&
         (masks.dtype() == v1::DTYPE_UINT8 || masks.dtype() == v1::DTYPE_INT32) &&
         masks.shape_size() == 2 && masks.shape(0) == images.shape(0) &&
         masks.shape(1) == images.shape(1);
}

// A multi-view batch's fields: views_0, views_1, ..., each uint8 [count, H,
// W, 3], and nothing else.
bool AreViewFields(const google::protobuf::RepeatedPtrField<v1::FieldSpec>& fields) {
  for (int g = 0; g < fields.size(); ++g) {
    const v1::FieldSpec& field = fields[g];
    if (field.name() != absl::StrCat("views_", g) || field.ragged() ||
        field.dtype() != v1::DTYPE_UINT8 || field.shape_size() != 4 || field.shape(3) != 3) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> FirstServers(ServerDiscovery& discovery,
                                                      const RemoteLoaderOptions& options) {
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  bool said = false;
  while (true) {
    std::vector<std::string> servers = discovery.Refresh();
    if (!servers.empty()) {
      return servers;
    }
    if (!said) {
      LogInfo("no data server listed yet (servers file '%s', DNS name '%s'); waiting up to %s",
              options.servers.servers_file, options.servers.dns_name,
              absl::FormatDuration(options.connect_timeout));
      said = true;
    }
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("no data server listed within ",
                                                 absl::FormatDuration(options.connect_timeout),
                                                 " (servers file '", options.servers.servers_file,
                                                 "', DNS name '", options.servers.dns_name, "')"));
    }
    if (options.interrupt_connect && options.interrupt_connect()) {
      return absl::CancelledError("interrupted while waiting for data servers");
    }
    absl::SleepFor(kConnectRetryPause);
  }
}

absl::StatusOr<v1::DatasetInfo> AgreeOnDataset(const std::vector<const ServerConnection*>& servers,
                                               const RemoteLoaderOptions& options) {
  ASSIGN_OR_RETURN(const std::vector<absl::StatusOr<v1::DatasetInfo>> infos,
                   AskServers(servers, options));
  return AgreedDataset(servers, infos, options.connect_timeout);
}

absl::StatusOr<google::protobuf::RepeatedPtrField<v1::FieldSpec>> BatchFieldsOf(
    const v1::DatasetInfo& info) {
  google::protobuf::RepeatedPtrField<v1::FieldSpec> fields = info.fields();
  if (fields.empty()) {
    *fields.Add() = ImagesField(info.height(), info.width());
  }
  if (const absl::Status checked = CheckFieldSpecs(fields); !checked.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the data servers' batches: ", checked.message()));
  }
  if (info.has_sample_structure()) {
    return fields;  // a user's own Python dataset: whatever its samples hold
  }
  const bool known =
      (IsImagesField(fields[0]) &&
       (fields.size() == 1 || (fields.size() == 2 && IsMasksFieldOf(fields[1], fields[0])) ||
        AreObjectFields(fields))) ||
      AreViewFields(fields);
  if (!known) {
    std::vector<std::string> names;
    for (const v1::FieldSpec& field : fields) {
      names.push_back(field.name());
    }
    return absl::UnimplementedError(absl::StrCat(
        "the data servers' batches hold the fields ", absl::StrJoin(names, ", "),
        "; this loader takes images alone, images and masks, images and objects (boxes, "
        "box_labels, iscrowd), or groups of views (views_0, views_1, ...) (a newer heterodl "
        "knows more)"));
  }
  return fields;
}

}  // namespace heterodl
