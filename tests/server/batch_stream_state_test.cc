#include "src/server/batch_stream_state.h"

#include <string>

#include "gtest/gtest.h"

namespace heterodl {
namespace {

using State = BatchStreamState<std::string>;
using Admission = State::Admission;

const absl::Time kBuilt = absl::FromUnixSeconds(1'800'000'000);

// Asks for `n` batches and expects each to be built.
void Request(State& state, int n) {
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<Admission> admission = state.Request();
    ASSERT_TRUE(admission.ok()) << admission.status();
    ASSERT_EQ(*admission, Admission::kBuild);
  }
}

TEST(BatchStreamStateTest, BatchesAreWrittenOneAtATimeInTheOrderBuilt) {
  State state(64);
  state.Open(64, /*pixels_on_channel=*/false);
  Request(state, 3);
  EXPECT_EQ(state.in_flight(), 3);
  ASSERT_TRUE(state.Built("b1", kBuilt));
  ASSERT_TRUE(state.Built("b2", kBuilt + absl::Seconds(1)));
  State::Actions first = state.Advance();
  ASSERT_NE(first.write, nullptr);
  EXPECT_EQ(*first.write, "b1");
  // gRPC allows one write outstanding: nothing more until it completes.
  EXPECT_EQ(state.Advance().write, nullptr);
  ASSERT_TRUE(state.Built("b3", kBuilt + absl::Seconds(2)));
  EXPECT_EQ(state.Advance().write, nullptr);
  EXPECT_EQ(state.WriteDone(true), kBuilt);  // received: counts from when it was built
  EXPECT_EQ(state.in_flight(), 2);
  State::Actions second = state.Advance();
  ASSERT_NE(second.write, nullptr);
  EXPECT_EQ(*second.write, "b2");
  EXPECT_EQ(state.WriteDone(true), kBuilt + absl::Seconds(1));
  EXPECT_EQ(*state.Advance().write, "b3");
  EXPECT_FALSE(state.Advance().finish);
}

TEST(BatchStreamStateTest, AHalfClosedStreamEndsOkOnceNothingIsOwed) {
  State state(64);
  state.Open(64, false);
  Request(state, 1);
  state.ReadsDone();
  // A build is still owed.
  State::Actions waiting = state.Advance();
  EXPECT_FALSE(waiting.finish);
  EXPECT_EQ(waiting.write, nullptr);
  ASSERT_TRUE(state.Built("b", kBuilt));
  ASSERT_NE(state.Advance().write, nullptr);
  EXPECT_FALSE(state.Advance().finish);  // its write is still owed
  state.WriteDone(true);
  State::Actions end = state.Advance();
  ASSERT_TRUE(end.finish.has_value());
  EXPECT_TRUE(end.finish->ok()) << *end.finish;
  EXPECT_FALSE(end.add_leaving_trailer);
  // Finish is started once.
  EXPECT_FALSE(state.Advance().finish);
}

TEST(BatchStreamStateTest, AnErrorEndsTheCallWithoutWaitingForBuilds) {
  State state(64);
  state.Open(64, false);
  Request(state, 2);
  state.RequestFinish(absl::InvalidArgumentError("bad batch id"));
  State::Actions end = state.Advance();
  ASSERT_TRUE(end.newly_finishing.has_value());  // drop the builds not started
  EXPECT_TRUE(absl::IsInvalidArgument(*end.newly_finishing));
  ASSERT_TRUE(end.finish.has_value());
  EXPECT_TRUE(absl::IsInvalidArgument(*end.finish));
  // A batch built after that is dropped, not written.
  EXPECT_FALSE(state.Built("late", kBuilt));
  EXPECT_EQ(state.Advance().write, nullptr);
  // A second reason changes nothing.
  state.RequestFinish(absl::CancelledError("stream cancelled"));
  EXPECT_FALSE(state.Advance().newly_finishing.has_value());
}

TEST(BatchStreamStateTest, TheCallEndsOnlyOnceNoWriteOrReadIsStarting) {
  State state(64);
  state.Open(64, false);
  Request(state, 1);
  ASSERT_TRUE(state.Built("b", kBuilt));
  ASSERT_NE(state.Advance().write, nullptr);
  ASSERT_TRUE(state.ContinueReading());  // a read is being started
  state.RequestFinish(absl::CancelledError("stream cancelled"));
  EXPECT_FALSE(state.ContinueReading());  // no more reads once ending
  EXPECT_FALSE(state.Advance().finish);   // the write is out
  state.WriteDone(false);
  EXPECT_FALSE(state.Advance().finish);  // the read is still starting
  state.ReadStarted();
  State::Actions end = state.Advance();
  ASSERT_TRUE(end.finish.has_value());
  EXPECT_TRUE(absl::IsCancelled(*end.finish));
}

TEST(BatchStreamStateTest, AHeldCallDoesNotEndUntilReleased) {
  State state(64);
  state.Open(64, false);
  Request(state, 1);
  ASSERT_TRUE(state.Built("b", kBuilt));
  ASSERT_NE(state.Advance().write, nullptr);  // a write the client never reads
  EXPECT_FALSE(state.ending());
  state.HoldFinish();  // the reactor cancels the call from outside a reaction
  state.RequestFinish(absl::ResourceExhaustedError("held its batches unread"));
  state.WriteDone(false);  // the cancel fails the write
  EXPECT_FALSE(state.Advance().finish);
  EXPECT_FALSE(state.ending());
  state.ReleaseFinish();
  State::Actions end = state.Advance();
  ASSERT_TRUE(end.finish.has_value());
  EXPECT_TRUE(absl::IsResourceExhausted(*end.finish));
  EXPECT_TRUE(state.ending());
}

TEST(BatchStreamStateTest, AFailedWriteEndsTheCall) {
  State state(64);
  state.Open(64, false);
  Request(state, 1);
  ASSERT_TRUE(state.Built("b", kBuilt));
  ASSERT_NE(state.Advance().write, nullptr);
  state.WriteDone(false);
  State::Actions end = state.Advance();
  ASSERT_TRUE(end.finish.has_value());
  EXPECT_TRUE(absl::IsCancelled(*end.finish));
}

TEST(BatchStreamStateTest, RequestsOverTheLimitAreRefused) {
  State state(64);
  state.Open(2, false);
  Request(state, 2);
  absl::StatusOr<Admission> third = state.Request();
  ASSERT_FALSE(third.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(third.status()));
  EXPECT_NE(third.status().message().find("more than 2 batches"), std::string::npos);
  // One received frees a place.
  ASSERT_TRUE(state.Built("b", kBuilt));
  ASSERT_NE(state.Advance().write, nullptr);
  state.WriteDone(true);
  Request(state, 1);
}

TEST(BatchStreamStateTest, ALeavingServerSendsWhatItBuildsAndEndsWithTheTrailer) {
  State state(64);
  state.Open(64, false);
  Request(state, 3);
  EXPECT_TRUE(state.Leave("SIGTERM"));
  EXPECT_FALSE(state.Leave("again"));
  // Asked from now on: not built, the client gets it back.
  absl::StatusOr<Admission> later = state.Request();
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(*later, Admission::kSkip);
  EXPECT_EQ(state.in_flight(), 3);
  // One was being built and is sent; two not started are dropped.
  ASSERT_TRUE(state.Built("b1", kBuilt));
  EXPECT_TRUE(state.BuildFailed(absl::CancelledError("stream closed")));
  EXPECT_TRUE(state.BuildFailed(absl::CancelledError("stream closed")));
  EXPECT_EQ(state.in_flight(), 1);
  State::Actions write = state.Advance();
  ASSERT_NE(write.write, nullptr);
  EXPECT_FALSE(write.add_leaving_trailer);
  state.WriteDone(true);
  State::Actions end = state.Advance();
  EXPECT_TRUE(end.add_leaving_trailer);
  ASSERT_TRUE(end.finish.has_value());
  EXPECT_TRUE(absl::IsUnavailable(*end.finish));
  EXPECT_EQ(end.finish->message(), "the data server is leaving: SIGTERM");
}

TEST(BatchStreamStateTest, ABuildFailingForAnotherReasonEndsTheCallEvenWhenLeaving) {
  State state(64);
  state.Open(64, false);
  Request(state, 1);
  state.Leave("SIGTERM");
  EXPECT_FALSE(state.BuildFailed(absl::ResourceExhaustedError("no memory")));
  State::Actions end = state.Advance();
  ASSERT_TRUE(end.finish.has_value());
  EXPECT_TRUE(absl::IsResourceExhausted(*end.finish));
}

TEST(BatchStreamStateTest, WithAPixelChannelABatchIsReceivedOnceItsPixelsAreSent) {
  State state(64);
  state.Open(64, /*pixels_on_channel=*/true);
  Request(state, 1);
  ASSERT_TRUE(state.Built("header", kBuilt));
  ASSERT_NE(state.Advance().write, nullptr);
  EXPECT_FALSE(state.WriteDone(true).has_value());  // the header alone is not the batch
  EXPECT_EQ(state.in_flight(), 1);
  state.ReadsDone();
  EXPECT_FALSE(state.Advance().finish);  // its pixels are still owed
  state.PixelsSent(true);
  EXPECT_EQ(state.in_flight(), 0);
  State::Actions end = state.Advance();
  ASSERT_TRUE(end.finish.has_value());
  EXPECT_TRUE(end.finish->ok());
}

TEST(BatchStreamStateTest, AClosedPixelChannelEndsTheCallUnlessGrpcAlreadyHas) {
  State state(64);
  state.Open(64, true);
  Request(state, 2);
  ASSERT_TRUE(state.Built("h1", kBuilt));
  ASSERT_TRUE(state.Built("h2", kBuilt));
  state.PixelsSent(false);
  State::Actions end = state.Advance();
  ASSERT_TRUE(end.newly_finishing.has_value());
  EXPECT_TRUE(absl::IsCancelled(*end.newly_finishing));

  State done(64);
  done.Open(64, true);
  Request(done, 1);
  ASSERT_TRUE(done.Built("h", kBuilt));
  done.Done();
  done.PixelsSent(false);  // dropped as the call went
  State::Actions after = done.Advance();
  EXPECT_FALSE(after.newly_finishing.has_value());
  EXPECT_FALSE(after.finish.has_value());
  EXPECT_EQ(after.write, nullptr);
}

}  // namespace
}  // namespace heterodl
