// Prometheus text format of the server metrics, error mapping, and Exchange semantics.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include "server/errors.h"
#include "server/http_types.h"

namespace sluice::server {
namespace {

TEST(Histogram, CumulativeBucketsSumAndCount) {
  Histogram h({0.1, 1});
  h.Observe(0.05);
  h.Observe(0.1);  // le is inclusive
  h.Observe(0.5);
  h.Observe(7);
  std::string out;
  h.Render(&out, "x", "route=\"/a\"");
  EXPECT_EQ(out,
            "x_bucket{route=\"/a\",le=\"0.10000000000000001\"} 2\n"
            "x_bucket{route=\"/a\",le=\"1\"} 3\n"
            "x_bucket{route=\"/a\",le=\"+Inf\"} 4\n"
            "x_sum{route=\"/a\"} 7.6500000000000004\n"
            "x_count{route=\"/a\"} 4\n");
}

TEST(Metrics, RendersEveryFamilyWithHelpAndType) {
  Metrics m;
  m.RecordResponse("/score", 200, 0.01);
  m.RecordResponse("/score", 200, 0.02);
  m.RecordResponse("/score", 429, 0.001);
  m.RecordStage(Stage::kQueue, 0.001);
  m.RecordStage(Stage::kCompute, 0.005);
  m.RecordBatch(3, 120, 0.25);
  m.RecordBatch(1, 200, 0.5);
  m.RecordStage(Stage::kRespond, 0.00007);
  m.AddTokens(120);
  m.AddCancelled();
  GaugeValues g;
  g.queue_depth = 2;
  g.in_flight = 5;
  g.ready = 1;
  const std::string out = m.Render(g);
  EXPECT_NE(out.find("sluice_prefix_reuse_batches_total 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("sluice_requests_total{route=\"/score\",code=\"200\"} 2\n"),
            std::string::npos);
  EXPECT_NE(out.find("sluice_requests_total{route=\"/score\",code=\"429\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("sluice_request_duration_seconds_count{route=\"/score\"} 3\n"),
            std::string::npos);
  EXPECT_NE(out.find("sluice_batch_tokens_bucket{le=\"128\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("sluice_tokens_total 120\n"), std::string::npos);
  EXPECT_NE(out.find("sluice_stage_seconds_count{stage=\"queue\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("sluice_stage_seconds_count{stage=\"parse\"} 0\n"), std::string::npos);
  EXPECT_NE(out.find("sluice_stage_seconds_bucket{stage=\"respond\",le=\"0.0001\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("sluice_engine_busy_seconds_total 0.75\n"), std::string::npos);
  EXPECT_NE(out.find("sluice_batches_total 2\n"), std::string::npos);
  EXPECT_NE(out.find("sluice_requests_cancelled_total 1\n"), std::string::npos);
  EXPECT_NE(out.find("sluice_queue_depth 2\n"), std::string::npos);
  EXPECT_NE(out.find("sluice_requests_in_flight 5\n"), std::string::npos);
  // Every sample line belongs to a family declared with # TYPE before it.
  std::string family;
  size_t pos = 0;
  while (pos < out.size()) {
    const size_t nl = out.find('\n', pos);
    ASSERT_NE(nl, std::string::npos) << "last line must end in a newline";
    const std::string line = out.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.rfind("# TYPE ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
    } else if (line[0] != '#') {
      EXPECT_EQ(line.rfind(family, 0), 0u) << line << " outside family " << family;
    }
  }
}

TEST(Errors, StatusMapsToHttp) {
  EXPECT_EQ(StatusResponse(InvalidArgument("x")).status, 400);
  EXPECT_EQ(StatusResponse(OutOfRange("x")).status, 400);
  EXPECT_EQ(StatusResponse(NotFound("x")).status, 404);
  HttpResponse r = StatusResponse(Status(StatusCode::kResourceExhausted, "full"));
  EXPECT_EQ(r.status, 429);
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].first, "Retry-After");
  EXPECT_EQ(StatusResponse(Status(StatusCode::kUnavailable, "x")).status, 503);
  EXPECT_EQ(ErrorResponse(413, "big \"body\"").body,
            R"({"error":{"message":"big \"body\"","type":"request_too_large","code":413}})");
}

TEST(Exchange, FirstResponseWinsAndDisconnectRunsHookOnce) {
  int sent = 0, hooks = 0;
  Exchange ex([&](HttpResponse&&) { ++sent; });
  ex.OnDisconnect([&] { ++hooks; });
  ex.NotifyDisconnected();
  ex.NotifyDisconnected();
  EXPECT_EQ(hooks, 1);
  EXPECT_TRUE(ex.Respond(HttpResponse{}));
  EXPECT_FALSE(ex.Respond(HttpResponse{}));
  EXPECT_EQ(sent, 1);
  // Registered after the disconnect: runs at once.
  ex.OnDisconnect([&] { ++hooks; });
  EXPECT_EQ(hooks, 2);
  // After a response, a disconnect is not reported.
  Exchange done([](HttpResponse&&) {});
  int late = 0;
  done.OnDisconnect([&] { ++late; });
  done.Respond(HttpResponse{});
  done.NotifyDisconnected();
  EXPECT_EQ(late, 0);
}

// Shared-prefix reuse counters: batches that reused a prefix, its groups and the tokens
// that saved.
TEST(Metrics, PrefixReuseCounters) {
  Metrics m;
  m.RecordBatch(4, 90, 0.1);
  m.RecordPrefixReuse(1, 30);  // 4 sequences shared a 10-token prefix
  m.RecordBatch(2, 50, 0.1);
  m.RecordPrefixReuse(0, 0);  // no shared prefix
  m.RecordBatch(6, 60, 0.1);
  m.RecordPrefixReuse(2, 16);  // two groups: 3 x 4 + 1 x 4
  const std::string out = m.Render(GaugeValues{});
  EXPECT_NE(out.find("sluice_prefix_reuse_batches_total 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("sluice_prefix_reuse_groups_total 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("sluice_prefix_reuse_tokens_saved_total 46\n"), std::string::npos) << out;
  EXPECT_NE(out.find("sluice_batches_total 3\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice::server
