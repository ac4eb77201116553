#include "src/storage/s3_client.h"

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_http_server.h"
#include "tests/testing/status_testing.h"

namespace heterodl {
namespace {

using ::testing::HasSubstr;

// "%2F" -> "/": what the client escaped.
std::string Unescape(absl::string_view text) {
  std::string plain;
  for (size_t i = 0; i < text.size(); ++i) {
    int byte = 0;
    if (text[i] == '%' && i + 2 < text.size() &&
        absl::SimpleHexAtoi(text.substr(i + 1, 2), &byte)) {
      plain.push_back(static_cast<char>(byte));
      i += 2;
    } else {
      plain.push_back(text[i]);
    }
  }
  return plain;
}

// A bucket as S3 serves it, path-style: ListObjectsV2 in pages of
// `page_size`, range GETs, HEAD, and S3's error documents. Faults are
// queued: each request takes the next one, if any.
class FakeS3 {
 public:
  explicit FakeS3(std::map<std::string, std::string> objects, int page_size = 1000)
      : objects_(std::move(objects)), page_size_(page_size) {}

  void QueueFaults(std::vector<FakeHttpReply> faults) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    faults_.insert(faults_.end(), faults.begin(), faults.end());
  }

  FakeHttpReply Answer(const FakeHttpRequest& request) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (!faults_.empty()) {
        FakeHttpReply fault = faults_.front();
        faults_.erase(faults_.begin());
        return fault;
      }
    }
    const std::vector<std::string> target = absl::StrSplit(request.target, absl::MaxSplits('?', 1));
    const std::vector<std::string> path = absl::StrSplit(target[0], absl::MaxSplits('/', 2));
    if (path.size() < 3 || path[1] != "bkt") {
      return Error(404, "NoSuchBucket", "The specified bucket does not exist");
    }
    if (target.size() > 1) {
      return List(target[1]);
    }
    const auto object = objects_.find(Unescape(path[2]));
    if (object == objects_.end()) {
      return Error(404, "NoSuchKey", "The specified key does not exist.");
    }
    const std::string range = request.header("range");
    if (range.empty()) {
      return FakeHttpReply{.body = object->second};
    }
    uint64_t first = 0;
    uint64_t last = 0;
    const std::vector<std::string> bounds = absl::StrSplit(absl::StripPrefix(range, "bytes="), '-');
    if (bounds.size() != 2 || !absl::SimpleAtoi(bounds[0], &first) ||
        !absl::SimpleAtoi(bounds[1], &last)) {
      return Error(400, "InvalidArgument", "bad range");
    }
    if (first >= object->second.size()) {
      return Error(416, "InvalidRange", "The requested range is not satisfiable");
    }
    return FakeHttpReply{.status = 206, .body = object->second.substr(first, last - first + 1)};
  }

  static FakeHttpReply Error(int status, const std::string& code, const std::string& message) {
    return FakeHttpReply{
        .status = status,
        .body = absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>", code,
                             "</Code><Message>", message, "</Message></Error>")};
  }

 private:
  FakeHttpReply List(const std::string& query) {
    std::string prefix;
    size_t start = 0;
    for (absl::string_view parameter : absl::StrSplit(query, '&')) {
      if (absl::ConsumePrefix(&parameter, "prefix=")) {
        prefix = Unescape(parameter);
      } else if (absl::ConsumePrefix(&parameter, "continuation-token=")) {
        EXPECT_TRUE(absl::SimpleAtoi(absl::StripPrefix(parameter, "page"), &start));
      }
    }
    std::vector<std::pair<std::string, size_t>> matching;
    for (const auto& [key, bytes] : objects_) {
      if (absl::StartsWith(key, prefix)) {
        matching.emplace_back(key, bytes.size());
      }
    }
    std::string body = "<ListBucketResult><Name>bkt</Name>";
    const size_t end = std::min(matching.size(), start + page_size_);
    for (size_t i = start; i < end; ++i) {
      absl::StrAppend(&body, "<Contents><Key>", matching[i].first, "</Key><Size>",
                      matching[i].second, "</Size></Contents>");
    }
    if (end < matching.size()) {
      absl::StrAppend(&body, "<IsTruncated>true</IsTruncated><NextContinuationToken>page", end,
                      "</NextContinuationToken>");
    } else {
      absl::StrAppend(&body, "<IsTruncated>false</IsTruncated>");
    }
    return FakeHttpReply{.body = body + "</ListBucketResult>"};
  }

  const std::map<std::string, std::string> objects_;
  const size_t page_size_;
  absl::Mutex mu_;
  std::vector<FakeHttpReply> faults_ ABSL_GUARDED_BY(mu_);
};

struct Fixture {
  std::unique_ptr<FakeS3> s3;
  std::unique_ptr<FakeHttpServer> server;
};

Fixture StartS3(std::map<std::string, std::string> objects, int page_size = 1000) {
  Fixture fixture;
  fixture.s3 = std::make_unique<FakeS3>(std::move(objects), page_size);
  FakeS3* s3 = fixture.s3.get();
  fixture.server = FakeHttpServer::Start([s3](const FakeHttpRequest& request) {
                     return s3->Answer(request);
                   }).value();
  return fixture;
}

// Signed with fixed keys, quick backoffs.
S3Options Options(const std::string& endpoint) {
  S3Options options;
  options.endpoint = endpoint;
  options.region = "eu-central-1";
  options.first_backoff = absl::Milliseconds(1);
  options.max_backoff = absl::Milliseconds(5);
  options.credentials.environment = [](const std::string& name) -> std::optional<std::string> {
    static const std::map<std::string, std::string> kKeys = {{"AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"},
                                                             {"AWS_SECRET_ACCESS_KEY", "SECRET"},
                                                             {"AWS_SESSION_TOKEN", "SESSION"}};
    const auto found = kKeys.find(name);
    return found == kKeys.end() ? std::nullopt : std::optional<std::string>(found->second);
  };
  return options;
}

TEST(S3ClientTest, ListingReadsEveryPageInKeyOrder) {
  std::map<std::string, std::string> objects;
  for (int i = 0; i < 25; ++i) {
    objects[absl::StrCat("train/", absl::Dec(i, absl::kZeroPad4), ".jpg")] = std::string(i, 'x');
  }
  objects["val/0.jpg"] = "v";
  Fixture fixture = StartS3(objects, /*page_size=*/10);
  ASSERT_OK_AND_ASSIGN(auto client, S3Client::Create(Options(fixture.server->url())));
  ASSERT_OK_AND_ASSIGN(const std::vector<ObjectInfo> listed, client->List({"bkt", "train/"}));
  ASSERT_EQ(listed.size(), 25u);
  EXPECT_EQ(listed.front().key, "train/0000.jpg");
  EXPECT_EQ(listed.back().key, "train/0024.jpg");
  EXPECT_EQ(listed[7].size, 7u);
  EXPECT_EQ(client->counts().requests, 3);
  const std::vector<FakeHttpRequest> sent = fixture.server->requests();
  EXPECT_EQ(sent[0].target, "/bkt/?list-type=2&prefix=train%2F");
  EXPECT_EQ(sent[1].target, "/bkt/?continuation-token=page10&list-type=2&prefix=train%2F");
}

TEST(S3ClientTest, RequestsAreSignedForTheRegionWithTheSessionToken) {
  Fixture fixture = StartS3({{"a/b c.jpg", "bytes"}});
  ASSERT_OK_AND_ASSIGN(auto client, S3Client::Create(Options(fixture.server->url())));
  ASSERT_OK_AND_ASSIGN(const std::string whole, client->GetAll({"bkt", "a/b c.jpg"}));
  EXPECT_EQ(whole, "bytes");
  const FakeHttpRequest sent = fixture.server->requests().at(0);
  EXPECT_EQ(sent.target, "/bkt/a/b%20c.jpg");
  EXPECT_THAT(sent.header("authorization"), HasSubstr("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"));
  EXPECT_THAT(sent.header("authorization"), HasSubstr("/eu-central-1/s3/aws4_request"));
  EXPECT_EQ(sent.header("x-amz-security-token"), "SESSION");
  EXPECT_FALSE(sent.header("x-amz-date").empty());
  EXPECT_EQ(sent.header("x-amz-content-sha256"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

  S3Options unsigned_options = Options(fixture.server->url());
  unsigned_options.unsigned_requests = true;
  ASSERT_OK_AND_ASSIGN(auto anonymous, S3Client::Create(unsigned_options));
  ASSERT_OK(anonymous->GetAll({"bkt", "a/b c.jpg"}).status());
  EXPECT_EQ(fixture.server->requests().at(1).header("authorization"), "");
}

TEST(S3ClientTest, VirtualHostedAddressingPutsTheBucketInTheHostName) {
  Fixture fixture = StartS3({});
  // libcurl answers *.localhost itself, with loopback.
  S3Options options = Options(absl::StrCat("http://localhost:", fixture.server->port()));
  options.addressing = S3Options::Addressing::kVirtualHosted;
  ASSERT_OK_AND_ASSIGN(auto client, S3Client::Create(options));
  (void)client->GetAll({"bkt", "k"});
  const FakeHttpRequest sent = fixture.server->requests().at(0);
  EXPECT_EQ(sent.header("host"), absl::StrCat("bkt.localhost:", fixture.server->port()));
  EXPECT_EQ(sent.target, "/k");
}

TEST(S3ClientTest, RangeReadsGetExactlyTheirBytes) {
  Fixture fixture = StartS3({{"shard.tar", "0123456789"}});
  ASSERT_OK_AND_ASSIGN(auto client, S3Client::Create(Options(fixture.server->url())));
  ASSERT_OK_AND_ASSIGN(const std::string middle, client->Get({"bkt", "shard.tar"}, 3, 4));
  EXPECT_EQ(middle, "3456");
  EXPECT_EQ(fixture.server->requests().at(0).header("range"), "bytes=3-6");
  ASSERT_OK_AND_ASSIGN(const std::string tail, client->Get({"bkt", "shard.tar"}, 8, 100));
  EXPECT_EQ(tail, "89");
  const absl::StatusOr<std::string> past = client->Get({"bkt", "shard.tar"}, 10, 1);
  EXPECT_TRUE(absl::IsOutOfRange(past.status())) << past.status();
  ASSERT_OK_AND_ASSIGN(const uint64_t size, client->Size({"bkt", "shard.tar"}));
  EXPECT_EQ(size, 10u);
}

TEST(S3ClientTest, WhatS3RefusesIsAStatusNamingTheUrlAndItsCode) {
  Fixture fixture = StartS3({});
  ASSERT_OK_AND_ASSIGN(auto client, S3Client::Create(Options(fixture.server->url())));
  const auto no_bucket = client->List({"other", "x/"});
  EXPECT_TRUE(absl::IsNotFound(no_bucket.status())) << no_bucket.status();
  EXPECT_THAT(no_bucket.status().message(), HasSubstr("s3://other/x/"));
  EXPECT_THAT(no_bucket.status().message(), HasSubstr("NoSuchBucket"));
  const auto no_key = client->GetAll({"bkt", "missing.jpg"});
  EXPECT_TRUE(absl::IsNotFound(no_key.status())) << no_key.status();
  EXPECT_THAT(no_key.status().message(), HasSubstr("NoSuchKey"));

  fixture.s3->QueueFaults({FakeS3::Error(403, "SignatureDoesNotMatch", "check your key")});
  const auto denied = client->List({"bkt", ""});
  EXPECT_TRUE(absl::IsPermissionDenied(denied.status())) << denied.status();
  EXPECT_THAT(denied.status().message(), HasSubstr("SignatureDoesNotMatch (HTTP 403)"));
  // Refusals are not retried.
  EXPECT_EQ(client->counts().retries, 0);
}

TEST(S3ClientTest, WhatPassesIsRetriedWithBackoff) {
  Fixture fixture = StartS3({{"k", std::string(4096, 'k')}});
  ASSERT_OK_AND_ASSIGN(auto client, S3Client::Create(Options(fixture.server->url())));
  fixture.s3->QueueFaults({
      FakeS3::Error(503, "SlowDown", "Please reduce your request rate."),
      FakeS3::Error(500, "InternalError", "We encountered an internal error."),
      // A reset mid-body: the headers say 4096 bytes, 100 come.
      FakeHttpReply{.status = 206, .body = std::string(4096, 'k'), .cut_after = 100},
  });
  ASSERT_OK_AND_ASSIGN(const std::string bytes, client->Get({"bkt", "k"}, 0, 4096));
  EXPECT_EQ(bytes, std::string(4096, 'k'));
  EXPECT_EQ(client->counts().requests, 4);
  EXPECT_EQ(client->counts().retries, 3);
}

TEST(S3ClientTest, StillFailingAfterEveryAttemptIsUnavailable) {
  Fixture fixture = StartS3({{"k", "v"}});
  S3Options options = Options(fixture.server->url());
  options.max_attempts = 3;
  ASSERT_OK_AND_ASSIGN(auto client, S3Client::Create(options));
  fixture.s3->QueueFaults(std::vector<FakeHttpReply>(
      3, FakeS3::Error(503, "ServiceUnavailable", "Reduce your request rate.")));
  const auto failed = client->GetAll({"bkt", "k"});
  EXPECT_TRUE(absl::IsUnavailable(failed.status())) << failed.status();
  EXPECT_THAT(failed.status().message(), HasSubstr("ServiceUnavailable"));
  EXPECT_THAT(failed.status().message(), HasSubstr("3 attempts"));
}

TEST(S3ClientTest, AStalledTransferIsAbandonedAndRetried) {
  Fixture fixture = StartS3({{"k", "v"}});
  S3Options options = Options(fixture.server->url());
  options.http.stall_timeout = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(auto client, S3Client::Create(options));
  FakeHttpReply slow = FakeS3::Error(500, "never seen", "");
  slow.delay = absl::Seconds(30);
  fixture.s3->QueueFaults({slow});
  ASSERT_OK_AND_ASSIGN(const std::string bytes, client->GetAll({"bkt", "k"}));
  EXPECT_EQ(bytes, "v");
  EXPECT_EQ(client->counts().retries, 1);
}

TEST(S3ClientTest, TheCancelFlagEndsARequestInFlight) {
  Fixture fixture = StartS3({{"k", "v"}});
  std::atomic<bool> cancelled{false};
  S3Options options = Options(fixture.server->url());
  options.http.cancelled = &cancelled;
  ASSERT_OK_AND_ASSIGN(auto client, S3Client::Create(options));
  FakeHttpReply slow = FakeS3::Error(500, "never seen", "");
  slow.delay = absl::Seconds(60);
  fixture.s3->QueueFaults({slow});
  std::thread canceller([&] {
    // Cancels once the request has reached the server.
    while (fixture.server->requests().empty()) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    cancelled = true;
  });
  const auto result = client->GetAll({"bkt", "k"});
  canceller.join();
  EXPECT_TRUE(absl::IsCancelled(result.status())) << result.status();
}

TEST(S3ClientTest, ABodyLargerThanAskedIsRefusedNotHeld) {
  // A server that ignores the range and sends the whole object.
  ASSERT_OK_AND_ASSIGN(auto server, FakeHttpServer::Start([](const FakeHttpRequest&) {
                         return FakeHttpReply{.status = 200, .body = std::string(1 << 20, 'z')};
                       }));
  ASSERT_OK_AND_ASSIGN(auto client, S3Client::Create(Options(server->url())));
  const auto result = client->Get({"bkt", "big"}, 1000, 10);
  EXPECT_FALSE(result.ok());
  EXPECT_FALSE(absl::IsUnavailable(result.status())) << result.status();
}

TEST(S3ClientTest, OptionsComeFromTheEnvironment) {
  const auto environment = [](const std::string& name) -> std::optional<std::string> {
    static const std::map<std::string, std::string> kVariables = {
        {"AWS_ENDPOINT_URL", "http://generic:9000"},
        {"AWS_ENDPOINT_URL_S3", "http://minio:9000"},
        {"AWS_DEFAULT_REGION", "us-west-2"}};
    const auto found = kVariables.find(name);
    return found == kVariables.end() ? std::nullopt : std::optional<std::string>(found->second);
  };
  const S3Options options = S3OptionsFromEnvironment(environment);
  EXPECT_EQ(options.endpoint, "http://minio:9000");
  EXPECT_EQ(options.region, "us-west-2");
  S3Options bad;
  bad.endpoint = "minio:9000";
  bad.unsigned_requests = true;
  EXPECT_TRUE(absl::IsInvalidArgument(S3Client::Create(bad).status()));
}

}  // namespace
}  // namespace heterodl
